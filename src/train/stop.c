#include "train/stop.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "formats/fileio.h"

static volatile sig_atomic_t g_signal;

static const struct {
    const char *name;
    int signo;
} SIGNALS[] = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
               {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"XCPU", SIGXCPU}};
#define NSIGNALS (int)(sizeof SIGNALS / sizeof *SIGNALS)

static void on_signal(int signo) {
    if (signo == SIGINT && g_signal == SIGINT) {
        fio_abandon();
        _exit(128 + SIGINT);
    }
    if (!g_signal) g_signal = signo;
}

int cb_stop_parse(const char *name, int *signo, cb_err *e) {
    const char *n = strncasecmp(name, "SIG", 3) ? name : name + 3;
    for (int i = 0; i < NSIGNALS; i++)
        if (!strcasecmp(n, SIGNALS[i].name)) return *signo = SIGNALS[i].signo, CB_OK;
    return cb_fail(e, CB_EINPUT, "--exit-signal %s is not one cubist handles; use USR1, USR2, "
                                 "TERM, INT, HUP, QUIT or XCPU", name);
}

const char *cb_stop_name(int signo) {
    static const char *const names[] = {"SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2",
                                        "SIGHUP",  "SIGQUIT", "SIGXCPU"};
    for (int i = 0; i < NSIGNALS; i++)
        if (SIGNALS[i].signo == signo) return names[i];
    return "a signal";
}

void cb_stop_install(int extra) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (extra) sigaction(extra, &sa, NULL);
}

int cb_stop_pending(void) { return g_signal; }
