build-mpich/src/model/gpt.o: src/model/gpt.c include/cubist.h \
 src/kernels/kernels.h src/model/gpt_internal.h src/util/rng.h
include/cubist.h:
src/kernels/kernels.h:
src/model/gpt_internal.h:
src/util/rng.h:
