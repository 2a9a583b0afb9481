/* sched-all.c - the scheduler's files compiled as one unit (see
 * SCHED_PRIVATE in sched-int.h): what the build compiles in place of the
 * files below, so the functions they share are static and inlined across
 * files as they were when the scheduler was one file.  Read the files, not
 * this one; a new sched-*.c file is added here. */
#define GP_SCHED_ONE_UNIT 1

#include "core/sched-util.c"
#include "core/sched-task.c"
#include "core/sched-queue.c"
#include "core/sched-fair.c"
#include "core/sched-policy.c"
#include "core/sched-place.c"
#include "core/sched-resv.c"
#include "core/sched-preempt.c"
#include "core/sched-elastic.c"
#include "core/sched-view.c"
#include "core/sched.c"
