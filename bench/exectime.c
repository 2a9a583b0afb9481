/* exectime.c - how long commands take to run, start to exit, measured many
 * times side by side (bench/bench-cli.sh uses it).
 *
 * usage: exectime [-n RUNS] [-r ROUNDS] [-w WARMUP] [-R LABEL]... \
 *                 LABEL CMD [ARG]... [:: LABEL CMD [ARG]...]...
 *
 * Each run is posix_spawn (vfork-style, so the timer's own size does not
 * matter) + waitpid of CMD with stdin, stdout and stderr on /dev/null,
 * timed with CLOCK_MONOTONIC.  CMD is run as given (no shell; PATH is
 * searched).  First WARMUP runs of each command (default 10, not counted),
 * then ROUNDS rounds (default 3) of RUNS runs (default 200) of every
 * command, interleaved: run i of each command in turn, the first command
 * of each turn rotating, so a slow moment of the machine falls on all of
 * them alike.  Prints, per round and over all rounds, the median, min and
 * max in milliseconds, then the ratio of each command's overall median to
 * that of each -R LABEL.  Exits 1 if a run does not exit 0 (and says which).
 * Links libc only; not part of the product.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMDS_MAX 16
#define REFS_MAX 4

extern char **environ;

struct cmd {
        const char *label;
        char **argv;               /* NULL-terminated, points into main's argv */
        double *ms;                /* rounds * runs samples */
};

static double now_ms(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

/* One run; its milliseconds, or -1 (message printed) when it did not exit 0. */
static double run_once(const struct cmd *c, const posix_spawn_file_actions_t *fa) {
        pid_t pid;
        int st;
        double t0 = now_ms();
        int e = posix_spawnp(&pid, c->argv[0], fa, NULL, c->argv, environ);
        if (e != 0) {
                fprintf(stderr, "exectime: cannot run %s: %s\n", c->argv[0], strerror(e));
                return -1;
        }
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR) {
                        perror("exectime: waitpid");
                        return -1;
                }
        double t = now_ms() - t0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "exectime: '%s' failed (status 0x%x)\n", c->label, st);
                return -1;
        }
        return t;
}

/* median, min, max of n samples (sorted in place) */
static void stats(double *v, int n, double *med, double *min, double *max) {
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        *med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
        *min = v[0];
        *max = v[n - 1];
}

static int usage(void) {
        fprintf(stderr, "usage: exectime [-n RUNS] [-r ROUNDS] [-w WARMUP] [-R LABEL]... "
                        "LABEL CMD [ARG]... [:: LABEL CMD [ARG]...]...\n");
        return 2;
}

static int num(const char *s, int min, int max) {
        char *end;
        long v = strtol(s, &end, 10);
        return (*s && !*end && v >= min && v <= max) ? (int)v : -1;
}

int main(int argc, char **argv) {
        int runs = 200, rounds = 3, warmup = 10, nref = 0, ncmd = 0, o;
        const char *refs[REFS_MAX];
        struct cmd cmds[CMDS_MAX];

        while ((o = getopt(argc, argv, "+n:r:w:R:")) != -1) {
                switch (o) {
                case 'n': runs = num(optarg, 1, 1000000); break;
                case 'r': rounds = num(optarg, 1, 1000); break;
                case 'w': warmup = num(optarg, 0, 1000000); break;
                case 'R':
                        if (nref == REFS_MAX)
                                return usage();
                        refs[nref++] = optarg;
                        break;
                default: return usage();
                }
                if (runs < 0 || rounds < 0 || warmup < 0)
                        return usage();
        }
        /* LABEL CMD [ARG]... separated by "::" (each "::" becomes the NULL ending its argv) */
        for (int i = optind; i < argc;) {
                if (ncmd == CMDS_MAX || i + 1 >= argc || !strcmp(argv[i + 1], "::"))
                        return usage();
                cmds[ncmd].label = argv[i];
                cmds[ncmd].argv = &argv[i + 1];
                int j = i + 1;
                while (j < argc && strcmp(argv[j], "::"))
                        j++;
                if (j < argc)
                        argv[j] = NULL;
                cmds[ncmd].ms = calloc((size_t)runs * (size_t)rounds, sizeof(double));
                if (!cmds[ncmd].ms)
                        return 1;
                ncmd++;
                i = j + 1;
        }
        if (ncmd == 0)
                return usage();
        for (int r = 0; r < nref; r++) {
                int found = 0;
                for (int c = 0; c < ncmd; c++)
                        found |= !strcmp(cmds[c].label, refs[r]);
                if (!found) {
                        fprintf(stderr, "exectime: -R %s names no command\n", refs[r]);
                        return 2;
                }
        }

        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        for (int fd = 0; fd <= 2; fd++)
                posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd ? O_WRONLY : O_RDONLY, 0);

        for (int i = 0; i < warmup; i++)
                for (int c = 0; c < ncmd; c++)
                        if (run_once(&cmds[c], &fa) < 0)
                                return 1;

        int lw = 7;
        for (int c = 0; c < ncmd; c++)
                if ((int)strlen(cmds[c].label) > lw)
                        lw = (int)strlen(cmds[c].label);
        printf("exectime: %d runs x %d rounds of each command, interleaved, after %d warm-up runs; "
               "times in ms, start to exit\n", runs, rounds, warmup);
        printf("%-*s  %5s  %8s  %8s  %8s\n", lw, "command", "round", "median", "min", "max");
        double *tmp = calloc((size_t)runs * (size_t)rounds, sizeof(double));
        if (!tmp)
                return 1;
        for (int r = 0; r < rounds; r++) {
                for (int i = 0; i < runs; i++)
                        for (int k = 0; k < ncmd; k++) {
                                struct cmd *c = &cmds[(i + k) % ncmd];
                                double t = run_once(c, &fa);
                                if (t < 0)
                                        return 1;
                                c->ms[r * runs + i] = t;
                        }
                for (int c = 0; c < ncmd; c++) {
                        double med, min, max;
                        memcpy(tmp, cmds[c].ms + r * runs, (size_t)runs * sizeof(double));
                        stats(tmp, runs, &med, &min, &max);
                        printf("%-*s  %5d  %8.3f  %8.3f  %8.3f\n", lw, cmds[c].label, r + 1, med, min, max);
                }
        }
        double meds[CMDS_MAX];
        printf("all %d runs of each:\n", runs * rounds);
        for (int c = 0; c < ncmd; c++) {
                double min, max;
                memcpy(tmp, cmds[c].ms, (size_t)runs * (size_t)rounds * sizeof(double));
                stats(tmp, runs * rounds, &meds[c], &min, &max);
                printf("%-*s  %5s  %8.3f  %8.3f  %8.3f\n", lw, cmds[c].label, "all", meds[c], min, max);
        }
        for (int r = 0; r < nref; r++) {
                int ref = 0;
                while (strcmp(cmds[ref].label, refs[r]))
                        ref++;
                printf("median / median of '%s':\n", refs[r]);
                for (int c = 0; c < ncmd; c++)
                        if (c != ref)
                                printf("  %-*s  %6.2fx\n", lw, cmds[c].label, meds[c] / meds[ref]);
        }
        free(tmp);
        for (int c = 0; c < ncmd; c++)
                free(cmds[c].ms);
        posix_spawn_file_actions_destroy(&fa);
        return 0;
}
