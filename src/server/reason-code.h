/* reason-code.h - the server's own reasons (why a task ended, why it is
 * stopping, why it is back in the queue, why a run ended) as a code and
 * arguments, so that a page says them in its reader's language.
 *
 * The scheduler's queue reasons carry their code from where they are made
 * (core/sched-view.c reason_put); the server's reasons are stored as text
 * (tasks.reason, runs.reason), so they are read back here against one
 * table of the English templates the server writes them with.  A text no
 * template matches has no code: the page shows the server's words. */
#ifndef GP_SERVER_REASON_CODE_H
#define GP_SERVER_REASON_CODE_H

#include <jansson.h>

/* The code and arguments of a server-made reason: a new object
 * {"code":"...","args":[...]} owned by the caller, where an argument that
 * is itself a reason (the why of "requeued (retry 1 of 3): WHY") is an
 * object {"text","code","args"} when it matches, else its text; NULL when
 * text matches no template (or is NULL or too long), or out of memory.
 * Pure: thread-safe. */
json_t *gp_reason_code(const char *text);

/* A queued task's reason_detail (daemon.c gp_daemon_reason_detail) whose
 * note ends in "; " and the task's own reason (a requeue, a preemption):
 * adds "note_reason", that reason's code and arguments with its "text".
 * Does nothing when the note has none or it matches no template. */
void gp_reason_code_note(json_t *detail, const char *note);

/* A queued task's reason that is not the scheduler's (core: no node can
 * hold it while the pool may grow), as gp_daemon_reason_detail sends one:
 * its code and arguments, "note" what follows core in shown (the text the
 * task shows) and note_reason as above.  NULL when core matches no
 * template or shown does not start with it. */
json_t *gp_reason_code_queued(const char *core, const char *shown);

#endif
