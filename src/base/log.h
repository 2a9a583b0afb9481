/* log.h - logging at the edges (daemon, CLI).  core/ and store/ never log;
 * they return errors.  Lines go to stderr as
 *   2026-11-22T11:40:00.123Z level message
 * Thread-safe (one write(2) per line). */
#ifndef GP_BASE_LOG_H
#define GP_BASE_LOG_H

enum { GP_LOG_ERROR, GP_LOG_WARN, GP_LOG_INFO, GP_LOG_DEBUG };

void gp_log_set_level(int level);
void gp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define gp_error(...) gp_log(GP_LOG_ERROR, __VA_ARGS__)
#define gp_warn(...) gp_log(GP_LOG_WARN, __VA_ARGS__)
#define gp_info(...) gp_log(GP_LOG_INFO, __VA_ARGS__)
#define gp_debug(...) gp_log(GP_LOG_DEBUG, __VA_ARGS__)

#endif
