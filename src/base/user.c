/* user.c - Unix users: lookup and a verified, permanent switch.
 *
 * Invariant: gp_user_become() either leaves the process with u's real,
 * effective and saved ids and u's groups (and, for a non-root u, no way
 * back to root), or returns an error; it never reports success for a
 * half-done switch.
 */
#include "base/user.h"

#include "base/util.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PW_BUF_SIZE 16384   /* one passwd entry's strings */

bool gp_user_name_ok(const char *s, size_t n) {
        if (!s || n == 0 || n >= GP_USER_NAME_MAX || s[0] == '-')
                return false;
        bool digits_only = true;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                          c == '_' || c == '-' || c == '.' || (c == '$' && i == n - 1 && i > 0);
                if (!ok)
                        return false;
                if (c < '0' || c > '9')
                        digits_only = false;
        }
        return !digits_only;
}

int gp_user_lookup(const char *name, gp_user *ret) {
        if (!name || !ret || !gp_user_name_ok(name, strlen(name)))
                return -EINVAL;
        char *buf = malloc(PW_BUF_SIZE);
        if (!buf)
                return -ENOMEM;
        struct passwd pw, *found = NULL;
        int e = getpwnam_r(name, &pw, buf, PW_BUF_SIZE, &found);
        if (e != 0 || !found) {
                free(buf);
                /* getpwnam_r(3): "not found" may also come as these */
                return e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM ? -ENOENT : -e;
        }
        gp_user u;
        memset(&u, 0, sizeof(u));
        gp_strlcpy(u.name, name, sizeof(u.name));
        u.uid = pw.pw_uid;
        u.gid = pw.pw_gid;
        if (!pw.pw_dir || !pw.pw_dir[0] || gp_strlcpy(u.home, pw.pw_dir, sizeof(u.home)) >= sizeof(u.home))
                gp_strlcpy(u.home, "/", sizeof(u.home));
        if (!pw.pw_shell || !pw.pw_shell[0] || gp_strlcpy(u.shell, pw.pw_shell, sizeof(u.shell)) >= sizeof(u.shell))
                gp_strlcpy(u.shell, "/bin/sh", sizeof(u.shell));
        free(buf);   /* pw's strings are not used past here */
        int n = GP_USER_MAX_GROUPS;
        if (getgrouplist(name, u.gid, u.groups, &n) < 0)
                return -E2BIG;
        u.ngroups = n;
        *ret = u;
        return 0;
}

int gp_user_become(const gp_user *u) {
        if (!u || u->ngroups < 0 || u->ngroups > GP_USER_MAX_GROUPS)
                return -EINVAL;
        /* groups first: after setuid we could no longer change them */
        if (setgroups((size_t)u->ngroups, u->groups) < 0)
                return -errno;
        if (setresgid(u->gid, u->gid, u->gid) < 0)
                return -errno;
        if (setresuid(u->uid, u->uid, u->uid) < 0)
                return -errno;
        uid_t ru, eu, su;
        gid_t rg, eg, sg;
        if (getresuid(&ru, &eu, &su) < 0 || getresgid(&rg, &eg, &sg) < 0)
                return -errno;
        if (ru != u->uid || eu != u->uid || su != u->uid || rg != u->gid || eg != u->gid || sg != u->gid)
                return -EPERM;
        if (u->uid != 0) {
                /* no way back: these must fail now */
                if (setuid(0) == 0 || seteuid(0) == 0)
                        return -EPERM;
                if (u->gid != 0 && (setgid(0) == 0 || setegid(0) == 0))
                        return -EPERM;
        }
        return 0;
}
