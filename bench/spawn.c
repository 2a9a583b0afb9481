/* spawn.c - how fast a process with a large resident heap starts short
 * commands: fork+exec, vfork+exec and posix_spawn, interleaved
 * (bench/bench-spawn.sh; issue 13: "measure posix_spawn/vfork against
 * fork" for starting batch tasks).
 *
 * Usage: spawn [-n N] [-r ROUNDS] [-m HEAP_MB] CMD [ARG...]
 *
 * It first allocates HEAP_MB MiB and writes every page (a long-running
 * daemon's resident memory: fork has to copy its page tables), then per
 * round runs every method in turn (the first rotating from round to
 * round), each starting CMD N times one after the other: start, then
 * waitpid.  Every child gets the same setup as the daemon gives a batch
 * supervisor: a session of its own (setsid) and stdin/stdout on /dev/null.
 * It prints per method the median [min - max] over the rounds of the
 * processes started and reaped per second, and of the median time the
 * parent is blocked in the start call (fork/vfork/posix_spawn until it
 * returns in the parent), in microseconds.
 *
 * libc only, no sanitizers (mk/bench.mk): it is the stopwatch.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum { M_FORK, M_VFORK, M_SPAWN, NMETHODS };
static const char *const names[NMETHODS] = {"fork+exec", "vfork+exec", "posix_spawn"};

static int64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
        return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double median_dbl(double *v, int n) {
        qsort(v, (size_t)n, sizeof(*v), cmp_dbl);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int null_fd = -1;

/* The child's side of fork/vfork: the same setup posix_spawn is asked for
 * below, then exec.  Only async-signal-safe calls. */
static void child(char **argv) {
        setsid();
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
        execve(argv[0], argv, environ);
        _exit(127);
}

/* Start argv once with method m: the child's pid (or -1), and the time the
 * parent was blocked in *blocked_ns. */
static pid_t start(int m, char **argv, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                   int64_t *blocked_ns) {
        pid_t pid = -1;
        int64_t t0 = now_ns();
        switch (m) {
        case M_FORK:
                pid = fork();
                if (pid == 0)
                        child(argv);
                break;
        case M_VFORK:
                pid = vfork();
                if (pid == 0)
                        child(argv);
                break;
        default:
                if ((errno = posix_spawn(&pid, argv[0], fa, attr, argv, environ)) != 0)
                        pid = -1;
                break;
        }
        *blocked_ns = now_ns() - t0;
        return pid;
}

int main(int argc, char **argv) {
        int n = 2000, rounds = 3, heap_mb = 200, opt;
        while ((opt = getopt(argc, argv, "+n:r:m:")) != -1) {
                switch (opt) {
                case 'n': n = atoi(optarg); break;
                case 'r': rounds = atoi(optarg); break;
                case 'm': heap_mb = atoi(optarg); break;
                default: goto usage;
                }
        }
        if (optind >= argc || n < 1 || n > 1000000 || rounds < 1 || rounds > 100 || heap_mb < 0 || heap_mb > 65536) {
usage:
                fprintf(stderr, "usage: spawn [-n N (1..1000000)] [-r ROUNDS (1..100)] [-m HEAP_MB (0..65536)] CMD [ARG...]\n");
                return 2;
        }
        char **cmd = argv + optind;
        if (access(cmd[0], X_OK) < 0) {
                fprintf(stderr, "spawn: %s: %s (give the command's full path)\n", cmd[0], strerror(errno));
                return 2;
        }
        null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null_fd < 0) {
                perror("spawn: /dev/null");
                return 1;
        }
        size_t heap = (size_t)heap_mb << 20;
        char *mem = heap ? malloc(heap) : NULL;
        if (heap && !mem) {
                fprintf(stderr, "spawn: cannot allocate %d MiB\n", heap_mb);
                return 1;
        }
        long page = sysconf(_SC_PAGESIZE);
        for (size_t i = 0; i < heap; i += (size_t)page)
                mem[i] = (char)i;
        long rss_pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f) {
                long size_pages;
                if (fscanf(f, "%ld %ld", &size_pages, &rss_pages) != 2)
                        rss_pages = 0;
                fclose(f);
        }
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        if (posix_spawn_file_actions_init(&fa) || posix_spawn_file_actions_adddup2(&fa, null_fd, STDIN_FILENO) ||
            posix_spawn_file_actions_adddup2(&fa, null_fd, STDOUT_FILENO) || posix_spawnattr_init(&attr) ||
            posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID)) {
                fprintf(stderr, "spawn: posix_spawn attributes failed\n");
                return 1;
        }
        double *rate = calloc((size_t)(NMETHODS * rounds), sizeof(*rate));
        double *blocked = calloc((size_t)(NMETHODS * rounds), sizeof(*blocked));
        int64_t *b = calloc((size_t)n, sizeof(*b));
        if (!rate || !blocked || !b)
                return 1;
        printf("spawn: %d processes per method and round, %d rounds interleaved, heap %d MiB touched (RSS %ld MiB)\n",
               n, rounds, heap_mb, rss_pages * page >> 20);
        printf("command:");
        for (char **a = cmd; *a; a++)
                printf(" %s", *a);
        printf("\n");
        fflush(stdout);
        int failed = 0;
        for (int r = 0; r < rounds; r++) {
                for (int k = 0; k < NMETHODS; k++) {
                        int m = (r + k) % NMETHODS;
                        int64_t t0 = now_ns();
                        for (int i = 0; i < n; i++) {
                                pid_t pid = start(m, cmd, &fa, &attr, &b[i]);
                                int st;
                                if (pid < 0) {
                                        fprintf(stderr, "spawn: %s: %s\n", names[m], strerror(errno));
                                        return 1;
                                }
                                while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                                        ;
                                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                                        failed++;
                        }
                        int64_t t = now_ns() - t0;
                        qsort(b, (size_t)n, sizeof(*b), cmp_i64);
                        rate[m * rounds + r] = n / (t / 1e9);
                        blocked[m * rounds + r] = b[n / 2] / 1e3;
                }
                fprintf(stderr, "  round %d/%d done\n", r + 1, rounds);
        }
        printf("%-12s %34s %40s\n", "method", "processes/s median [min - max]",
               "parent blocked, us per start (median)");
        for (int m = 0; m < NMETHODS; m++) {
                double *v = rate + m * rounds, *w = blocked + m * rounds;
                double mv = median_dbl(v, rounds), mw = median_dbl(w, rounds);
                char a[64], c[64];
                snprintf(a, sizeof(a), "%.0f [%.0f - %.0f]", mv, v[0], v[rounds - 1]);
                snprintf(c, sizeof(c), "%.1f [%.1f - %.1f]", mw, w[0], w[rounds - 1]);
                printf("%-12s %34s %40s\n", names[m], a, c);
        }
        if (failed)
                printf("spawn: %d runs did not exit 0\n", failed);
        free(mem);
        return failed ? 3 : 0;
}
