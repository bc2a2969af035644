build-mpich/src/kernels/cpu.o: src/kernels/cpu.c src/kernels/kernels.h
src/kernels/kernels.h:
