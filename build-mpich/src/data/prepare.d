build-mpich/src/data/prepare.o: src/data/prepare.c include/cubist.h \
 src/data/tokenizer.h src/formats/fileio.h
include/cubist.h:
src/data/tokenizer.h:
src/formats/fileio.h:
