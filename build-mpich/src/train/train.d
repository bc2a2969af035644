build-mpich/src/train/train.o: src/train/train.c src/train/train.h \
 include/cubist.h src/data/loader.h src/util/rng.h src/optim/adamw.h \
 src/kernels/kernels.h src/model/gpt_internal.h
src/train/train.h:
include/cubist.h:
src/data/loader.h:
src/util/rng.h:
src/optim/adamw.h:
src/kernels/kernels.h:
src/model/gpt_internal.h:
