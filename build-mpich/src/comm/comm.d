build-mpich/src/comm/comm.o: src/comm/comm.c src/comm/comm.h \
 include/cubist.h
src/comm/comm.h:
include/cubist.h:
