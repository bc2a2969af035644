build-mpich/src/optim/adamw.o: src/optim/adamw.c src/optim/adamw.h \
 include/cubist.h src/kernels/kernels.h
src/optim/adamw.h:
include/cubist.h:
src/kernels/kernels.h:
