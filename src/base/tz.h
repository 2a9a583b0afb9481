/* tz.h - IANA time zones from the system's TZif files, without touching
 * the process-wide TZ (setenv/tzset are not thread-safe).
 *
 * gp_tz_load reads /usr/share/zoneinfo/NAME (version 1 or the 64-bit
 * version 2+ block), bounded in size; gp_tz_offset is pure.  Instants
 * after the file's last transition use its last offset (Debian's tzdata
 * holds transitions up to 2037). */
#ifndef GP_BASE_TZ_H
#define GP_BASE_TZ_H

#include <stdint.h>

#define GP_TZ_NAME_MAX 64
#define GP_TZ_MAX_TRANS 2400
#define GP_TZ_MAX_TYPES 64

typedef struct gp_tz {
        char name[GP_TZ_NAME_MAX];
        int ntrans, ntypes;
        int64_t trans[GP_TZ_MAX_TRANS];     /* UTC seconds, ascending */
        uint8_t idx[GP_TZ_MAX_TRANS];       /* type in force from trans[i] */
        int32_t utoff[GP_TZ_MAX_TYPES];     /* seconds east of UTC */
        uint8_t isdst[GP_TZ_MAX_TYPES];
} gp_tz;

/* Load a zone by IANA name ("Asia/Shanghai", "UTC").  Names are letters,
 * digits, '_', '-', '+' and '/' parts (no "..").  0, -EINVAL (bad name or
 * file), -ENOENT (no such zone). Thread-safe. */
int gp_tz_load(const char *name, gp_tz *ret);
/* Seconds east of UTC in force at utc_s. */
int32_t gp_tz_offset(const gp_tz *tz, int64_t utc_s);
/* Minutes after local midnight (0..1439) at utc_ms. */
int gp_tz_minute_of_day(const gp_tz *tz, int64_t utc_ms);

#endif
