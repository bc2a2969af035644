build-mpich/src/data/tokenizer.o: src/data/tokenizer.c \
 src/data/tokenizer.h
src/data/tokenizer.h:
