build-mpich/src/util/rng.o: src/util/rng.c src/util/rng.h
src/util/rng.h:
