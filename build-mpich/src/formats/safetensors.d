build-mpich/src/formats/safetensors.o: src/formats/safetensors.c \
 include/cubist.h src/formats/fileio.h src/formats/json.h
include/cubist.h:
src/formats/fileio.h:
src/formats/json.h:
