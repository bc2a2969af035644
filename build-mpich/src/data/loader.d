build-mpich/src/data/loader.o: src/data/loader.c src/data/loader.h \
 include/cubist.h src/util/rng.h
src/data/loader.h:
include/cubist.h:
src/util/rng.h:
