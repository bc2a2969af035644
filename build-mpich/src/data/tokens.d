build-mpich/src/data/tokens.o: src/data/tokens.c include/cubist.h \
 src/formats/fileio.h
include/cubist.h:
src/formats/fileio.h:
