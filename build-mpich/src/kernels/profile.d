build-mpich/src/kernels/profile.o: src/kernels/profile.c \
 src/kernels/profile.h src/kernels/kernels.h
src/kernels/profile.h:
src/kernels/kernels.h:
