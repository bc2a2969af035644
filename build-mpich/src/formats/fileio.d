build-mpich/src/formats/fileio.o: src/formats/fileio.c \
 src/formats/fileio.h include/cubist.h
src/formats/fileio.h:
include/cubist.h:
