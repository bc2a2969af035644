build-mpich/src/util/err.o: src/util/err.c include/cubist.h
include/cubist.h:
