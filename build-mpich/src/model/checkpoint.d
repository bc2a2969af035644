build-mpich/src/model/checkpoint.o: src/model/checkpoint.c \
 include/cubist.h src/model/gpt_internal.h src/kernels/kernels.h
include/cubist.h:
src/model/gpt_internal.h:
src/kernels/kernels.h:
