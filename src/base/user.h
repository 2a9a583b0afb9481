/* user.h - Unix users: looking one up, and becoming it for good.
 *
 * Used by the daemon to drop root after start-up (server.user) and by a
 * task's supervisor to run the command as its tenant's user
 * (tenants[].run_as).  Looking up reads the user database (NSS) and may be
 * called from any thread; switching changes the credentials of the whole
 * process and is meant for a single-threaded process (before the daemon
 * starts threads, or in a forked child before exec).
 */
#ifndef GP_BASE_USER_H
#define GP_BASE_USER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define GP_USER_NAME_MAX 33      /* a user name, with the NUL (useradd allows 32) */
#define GP_USER_MAX_GROUPS 256   /* supplementary groups of a user we switch to */

typedef struct gp_user {
        char name[GP_USER_NAME_MAX];
        char home[256];                      /* home directory ("/" when longer or empty) */
        char shell[128];                     /* login shell ("/bin/sh" when longer or empty) */
        uid_t uid;
        gid_t gid;                           /* primary group */
        int ngroups;                         /* supplementary groups, primary included */
        gid_t groups[GP_USER_MAX_GROUPS];
} gp_user;

/* true if s[0..n) is a user name we accept: 1..32 bytes of letters,
 * digits, '_', '-', '.', not starting with '-', with an optional final
 * '$', and not all digits (that would read as a uid).  Pure. */
bool gp_user_name_ok(const char *s, size_t n);

/* Look name up (getpwnam_r, getgrouplist).  0; -EINVAL (bad name);
 * -ENOENT (no such user); -E2BIG (in more than GP_USER_MAX_GROUPS
 * groups); -errno of the user database.  *ret written only on success. */
int gp_user_lookup(const char *name, gp_user *ret);

/* Become u for good: setgroups, setgid, setuid, then check that real and
 * effective ids are u's and, unless u is root, that setuid(0) and setgid(0)
 * fail.  Makes only system calls (async-signal-safe: usable between fork
 * and exec).  0, -errno of the failing call, or -EPERM when a check fails
 * (the credentials are then in an unknown state: the caller must not go
 * on, it exits). */
int gp_user_become(const gp_user *u);

#endif
