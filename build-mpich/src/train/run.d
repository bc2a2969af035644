build-mpich/src/train/run.o: src/train/run.c src/train/train.h \
 include/cubist.h src/data/loader.h src/util/rng.h src/optim/adamw.h \
 src/kernels/kernels.h
src/train/train.h:
include/cubist.h:
src/data/loader.h:
src/util/rng.h:
src/optim/adamw.h:
src/kernels/kernels.h:
