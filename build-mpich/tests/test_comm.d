build-mpich/tests/test_comm: tests/test_comm.c src/comm/comm.h \
 include/cubist.h src/comm/grid.h
src/comm/comm.h:
include/cubist.h:
src/comm/grid.h:
