build-mpich/src/formats/json.o: src/formats/json.c src/formats/json.h
src/formats/json.h:
