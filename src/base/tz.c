/* tz.c - TZif reader (RFC 8536), bounded; see tz.h. */
#include "base/tz.h"

#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TZ_FILE_MAX (256 * 1024)

static bool name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= GP_TZ_NAME_MAX || s[0] == '/' || strstr(s, ".."))
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
                      *s == '-' || *s == '+' || *s == '/'))
                        return false;
        return true;
}

static uint32_t be32(const uint8_t *p) {
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const uint8_t *p) {
        return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

typedef struct hdr {
        uint32_t isut, isstd, leap, time, type, chars;
} hdr;

static int read_hdr(const uint8_t *p, size_t len, hdr *h) {
        if (len < 44 || memcmp(p, "TZif", 4) != 0)
                return -EINVAL;
        h->isut = be32(p + 20);
        h->isstd = be32(p + 24);
        h->leap = be32(p + 28);
        h->time = be32(p + 32);
        h->type = be32(p + 36);
        h->chars = be32(p + 40);
        if (h->type == 0 || h->type > GP_TZ_MAX_TYPES || h->time > GP_TZ_MAX_TRANS || h->leap > 10000 ||
            h->chars > 10000 || h->isut > h->type || h->isstd > h->type)
                return -EINVAL;
        return 0;
}

static size_t block_len(const hdr *h, int tsize) {
        return (size_t)h->time * (size_t)tsize + h->time + (size_t)h->type * 6 + h->chars +
               (size_t)h->leap * (size_t)(tsize + 4) + h->isstd + h->isut;
}

int gp_tz_load(const char *name, gp_tz *ret) {
        if (!name_ok(name))
                return -EINVAL;
        char path[128];
        snprintf(path, sizeof(path), "/usr/share/zoneinfo/%s", name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno;
        uint8_t *buf = malloc(TZ_FILE_MAX);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        size_t len = 0;
        for (;;) {
                ssize_t n = read(fd, buf + len, TZ_FILE_MAX - len);
                if (n <= 0)
                        break;
                len += (size_t)n;
                if (len == TZ_FILE_MAX)
                        break;
        }
        close(fd);
        gp_tz *tz = calloc(1, sizeof(*tz));
        hdr h;
        int rc = tz ? read_hdr(buf, len, &h) : -ENOMEM;
        const uint8_t *p = buf + 44;
        int tsize = 4;
        if (rc == 0 && buf[4] >= '2') {
                /* skip the 32-bit block to the 64-bit one */
                size_t skip = block_len(&h, 4);
                if (44 + skip > len || (rc = read_hdr(buf + 44 + skip, len - 44 - skip, &h)) < 0) {
                        rc = -EINVAL;
                } else {
                        p = buf + 44 + skip + 44;
                        tsize = 8;
                }
        }
        if (rc == 0 && (size_t)(p - buf) + block_len(&h, tsize) > len)
                rc = -EINVAL;
        if (rc == 0) {
                gp_strlcpy(tz->name, name, sizeof(tz->name));
                tz->ntrans = (int)h.time;
                tz->ntypes = (int)h.type;
                for (uint32_t i = 0; i < h.time; i++)
                        tz->trans[i] = tsize == 8 ? be64(p + 8 * i) : (int32_t)be32(p + 4 * i);
                p += (size_t)h.time * (size_t)tsize;
                for (uint32_t i = 0; i < h.time; i++) {
                        if (p[i] >= h.type) {
                                rc = -EINVAL;
                                break;
                        }
                        tz->idx[i] = p[i];
                }
                p += h.time;
                for (uint32_t i = 0; rc == 0 && i < h.type; i++) {
                        tz->utoff[i] = (int32_t)be32(p + 6 * i);
                        tz->isdst[i] = p[6 * i + 4];
                        if (tz->utoff[i] < -26 * 3600 || tz->utoff[i] > 26 * 3600)
                                rc = -EINVAL;
                }
                for (int i = 1; rc == 0 && i < tz->ntrans; i++)
                        if (tz->trans[i] < tz->trans[i - 1])
                                rc = -EINVAL;
        }
        if (rc == 0)
                *ret = *tz;
        free(tz);
        free(buf);
        return rc;
}

int32_t gp_tz_offset(const gp_tz *tz, int64_t utc_s) {
        if (tz->ntrans == 0 || utc_s < tz->trans[0]) {
                /* before the first transition: the first standard-time type */
                for (int i = 0; i < tz->ntypes; i++)
                        if (!tz->isdst[i])
                                return tz->utoff[i];
                return tz->utoff[0];
        }
        int lo = 0, hi = tz->ntrans - 1;
        while (lo < hi) {
                int mid = (lo + hi + 1) / 2;
                if (tz->trans[mid] <= utc_s)
                        lo = mid;
                else
                        hi = mid - 1;
        }
        return tz->utoff[tz->idx[lo]];
}

int gp_tz_minute_of_day(const gp_tz *tz, int64_t utc_ms) {
        int64_t s = utc_ms / 1000 + gp_tz_offset(tz, utc_ms / 1000);
        int64_t m = (s / 60) % 1440;
        return (int)(m < 0 ? m + 1440 : m);
}
