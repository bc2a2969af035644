build-mpich/src/comm/grid.o: src/comm/grid.c src/comm/grid.h \
 src/comm/comm.h include/cubist.h
src/comm/grid.h:
src/comm/comm.h:
include/cubist.h:
