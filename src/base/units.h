/* units.h - durations and memory sizes as people type them.
 *
 * One parser for every place a duration or a size comes from a person:
 * the CLI's options (--timeout, --time, --ttl, --mem), the #GPUPOOL and
 * #SBATCH lines of a script, and the config's *_s keys.  Pure functions:
 * no allocation, no locale, no global state; thread-safe.
 */
#ifndef GP_BASE_UNITS_H
#define GP_BASE_UNITS_H

#include <stddef.h>
#include <stdint.h>

#define GP_UNITS_MAX_LEN 32 /* longer strings are refused (-EINVAL) */

/* How a bare number ("90") is read by gp_duration_parse. */
enum {
        GP_DUR_PLAIN_SECONDS = 0, /* gpupool's own options and the config: 90 = 90 s */
        GP_DUR_PLAIN_MINUTES = 1, /* Slurm's --time: 90 = 90 min, 5:30 = 5 min 30 s */
};

/* Parse a duration into whole seconds, 0..max:
 *   N            seconds (GP_DUR_PLAIN_SECONDS) or minutes (GP_DUR_PLAIN_MINUTES)
 *   Ns Nm Nh Nd  seconds, minutes, hours, days (one unit, no spaces)
 *   MM:SS  HH:MM:SS  D-HH  D-HH:MM  D-HH:MM:SS   Slurm's forms (minutes and
 *                seconds 0..59, hours 0..23 after a day; the first field
 *                has no upper bound)
 * Returns 0 with *ret set, -EINVAL for anything else (empty, sign, spaces,
 * junk, a field out of its range), -ERANGE when the value exceeds max
 * (also on overflow).  *ret is written only on success. */
int gp_duration_parse(const char *s, int flags, int64_t max, int64_t *ret);

/* Parse a memory size into MiB, 0..max_mb: a plain number is MiB; K, M,
 * G, T (case-insensitive, optionally followed by "B" or "iB") are KiB, MiB,
 * GiB and TiB, binary as Slurm's; K rounds up to a whole MiB.  Returns 0,
 * -EINVAL (not a size), -ERANGE (above max_mb, or overflow). */
int gp_size_mb_parse(const char *s, int64_t max_mb, int64_t *ret);

#endif
