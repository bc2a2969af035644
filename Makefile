# cubist build. Plain make: the tree is small, the dependencies are Debian
# packages at fixed paths, and every target below is one line of intent.
#   make            library + command line          make test   full suite
#   make demo       train a small GPT, sample        make asan   suite under ASan+UBSan
#   make check      the fast tier (under a minute)
#   make bench      benchmark vs PyTorch             make deps   install packages
#   make test-slurm cubist under srun on a local one-node Slurm (root)
#   make fuzz       libFuzzer on the file readers, FUZZ_SECONDS each (tests/fuzz)
CC      ?= cc
MPI     ?= openmpi
# Each MPI builds in its own directory (build, build-mpich), so switching MPI
# never reuses the other's objects; a BUILD given by hand is guarded by the
# MPI stamp below.
BUILD   ?= $(if $(filter mpich,$(MPI)),build-mpich,build)
# One threading model: OpenMP for cubist's loops and the OpenMP build of
# OpenBLAS, so GEMM threads and loop threads are the same team (no spinning
# pools fighting over the two cores).
BLASDIR ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
OPT     ?= -O3 -march=native
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fopenmp -fno-math-errno -Iinclude -Isrc -MMD -MP $(OPT) $(SAN)
LDLIBS  += -L$(BLASDIR) -Wl,-rpath,$(BLASDIR) -lopenblas -ldnnl -lm -fopenmp $(SAN)
# MPI=openmpi or MPI=mpich (Debian installs both side by side; build each in
# its own BUILD dir). pkg-config knows their paths; -isystem keeps -Werror off
# their headers. MPIRUN is the matching launcher, exported to the tests.
MPI_PC_openmpi := ompi-c
MPI_PC_mpich   := mpich
MPI_PC  := $(or $(MPI_PC_$(MPI)),$(error MPI=$(MPI) is unknown; use MPI=openmpi or MPI=mpich))
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags $(MPI_PC) 2>/dev/null))
MPI_LIBS   := $(shell pkg-config --libs $(MPI_PC) 2>/dev/null)
$(if $(MPI_LIBS),,$(warning MPI=$(MPI): pkg-config $(MPI_PC) not found; install libopenmpi-dev or libmpich-dev (make deps)))
MPIRUN  ?= mpirun.$(MPI)
export MPI MPIRUN
CFLAGS  += $(MPI_CFLAGS)
LDLIBS  += $(MPI_LIBS)
# $(BUILD)/.mpi holds the MPI its objects were compiled for; it is rewritten
# (and so everything rebuilt) only when MPI changes for the same BUILD.
MPI_STAMP := $(BUILD)/.mpi
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(MPI_STAMP) 2>/dev/null)" = "$(MPI)" ] || echo $(MPI) > $(MPI_STAMP); })
endif

LIB_SRC  := $(sort $(wildcard src/*/*.c))
CLI_SRC  := $(sort $(wildcard cli/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(sort $(wildcard examples/*.c)))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(sort $(wildcard bench/*.c)))

.PHONY: all deps test check test-slurm demo asan bench clean fuzz
all: $(BUILD)/cubist $(TESTS) $(EXAMPLES) $(BENCHES)

$(BUILD)/%.o: %.c $(MPI_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libcubist.a: $(LIB_OBJ)
	@rm -f $@
	@echo "  AR    $@"
	@ar rcs $@ $^

$(BUILD)/cubist: $(CLI_OBJ) $(BUILD)/libcubist.a
	@echo "  LINK  $@"
	@$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libcubist.a $(MPI_STAMP)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	@$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcubist.a $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libcubist.a $(MPI_STAMP)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	@$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcubist.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libcubist.a $(MPI_STAMP)
	@mkdir -p $(dir $@)
	@echo "  LINK  $@"
	@$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libcubist.a $(LDLIBS)

deps:
	@scripts/deps.sh

# test, check and demo build on every core unless make was given -j itself
# (the build is about 50 s of CPU time here)
ALL_JOBS = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(shell nproc))

test: deps
	@$(MAKE) --no-print-directory $(ALL_JOBS) all
	@BUILD=$(BUILD) tests/run.sh

# the fast tier (under a minute): the tests named in tests/fast.txt
check: deps
	@$(MAKE) --no-print-directory $(ALL_JOBS) all
	@BUILD=$(BUILD) FAST=1 tests/run.sh

# cubist under srun on a one-node Slurm cluster it starts and stops (root;
# installs slurm-wlm and munge if missing); not part of `make test`
test-slurm: all
	@BUILD=$(BUILD) scripts/test_slurm.sh

# use_tls=0: gcc 12's LeakSanitizer scans a stale dynamic-TLS entry that a
# library MPI loads leaves behind (seen as "DTLS 9 at 0x3b48") and its tracer
# crashes now and then on many-rank runs; not scanning TLS avoids that, and
# only libgomp's per-thread team (tests/lsan.supp) lives there.
# TMO_SCALE: instrumented ranks run 3-5x slower (27 oversubscribed ranks of
# test_layout_3d took over the 60 s hang timeout), so timeouts stretch x5.
asan:
	@TMO_SCALE=$${TMO_SCALE:-5} LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0:use_tls=0 \
	 ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
	 $(MAKE) --no-print-directory test BUILD=build-asan OPT="-O1 -g -march=native" SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

# the safetensors, token-file and JSON readers under libFuzzer (clang),
# seeded from tests/fuzz/corpus; `make test` replays the seeds once
FUZZ_SECONDS ?= 60
fuzz:
	@BUILD=$(BUILD) tests/fuzz/fuzz.sh fuzz $(FUZZ_SECONDS)

demo: deps
	@$(MAKE) --no-print-directory $(ALL_JOBS) all
	@scripts/demo.sh

bench: deps
	@$(MAKE) --no-print-directory $(ALL_JOBS) all
	$(BUILD)/cubist bench

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
