/* nodes-int.h - the node registry's records, shared by nodes.c and the
 * files that carry parts of it (nodes-run.c, nodes-record.c).  Everything
 * here is under d->lock; outside src/server/nodes*.c nothing includes it. */
#ifndef GP_SERVER_NODES_INT_H
#define GP_SERVER_NODES_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/i64map.h"
#include "base/list.h"
#include "cluster/proto.h"
#include "server/nodes-fence.h"
#include "server/nodes.h"

typedef struct node_gpu {
        gp_proto_gpu g;
        uint32_t sid;               /* the scheduler's GPU id */
} node_gpu;

typedef struct gp_node {
        char name[GP_NODE_MAX];
        gp_node_state state;
        bool drain;                 /* drained by an admin (kept while lost) */
        char cred[65];              /* hex SHA-256 of its credential; "" = none (left) */
        char address[GP_PROTO_ADDR_MAX];
        char labels[GP_LABELS_MAX]; /* canonical, without the implicit gpupool/node */
        char version[GP_PROTO_VERSION_MAX];
        char backend[GP_PROTO_BACKEND_MAX];
        int64_t joined_ms, left_ms, hb_ms;
        int64_t seq;                /* the last sync's seq taken (at start: seq_floor) */
        int64_t seq_floor;          /* stored: after a restart every seq up to it is a replay (cluster/ident.h) */
        int64_t join_seq;           /* stored: the seq of the join that made its credential */
        char machine[65];           /* stored: hex SHA-256 of its machine key ("" = none) */
        int full_page;              /* the next page of the full sync it is sending; -1 = none */
        gp_i64map fullset;          /* FULL_KEY(task, epoch): runs listed in that full sync's pages so far */
        bool synced;                /* a full sync since the server started */
        bool restored;              /* known from the store at this start, not heard from since: no new work */
        bool dirty;                 /* its record is to be stored (in nodes->dirty) */
        bool touched;               /* in nodes->touched: got starts or stops since the last flush */
        bool leaving;               /* removed: its GPUs are still in the scheduler */
        bool removing;              /* removal asked: its runs are stopping; it leaves when they ended */
        int ngpus;
        node_gpu *gpus;
        gp_list hb;                 /* in by_hb while ready or draining */
        int64_t hb_mono;            /* hb_ms on the monotonic clock: liveness and fencing count on it */
        int64_t paused_at;          /* the server's paused_ms at hb_ms (nodes-fence.h) */
        gp_list fl;                 /* in fencing while lost and its runs may still run */
        struct hreq *held;          /* a sync held until there is something to send */
        int64_t held_seq, held_until;
        gp_list hl;                 /* in held, while held */
        gp_proto_run_id *ostart;    /* runs to start */
        size_t nostart, capostart;
        gp_proto_stop *ostop;       /* runs to stop */
        size_t nostop, capostop;
        gp_proto_run_id *oresize;   /* elastic runs whose GPU set changed: sent their current one */
        size_t noresize, caporesize;
        bool resize;                /* stored: its agent applies resizes (elastic tasks may run here) */
        gp_i64map seen;             /* task -> epoch: runs its agent reported since the server started */
        gp_i64map stopping;         /* task -> (epoch << 2 | why) + 1: a stop sent again until its end */
        struct gp_node_tele *tele;  /* its last readings (nodes-tele.h), NULL before the first */
} gp_node;

typedef struct jtoken {
        char id[24];
        char hash[72];              /* "sha256:<hex>" */
        int64_t created_ms, expires_ms;
        bool revoked;
} jtoken;

/* What the loop found for the answer of one sync (the cmd's reply). */
typedef struct node_reply {
        bool want_full;
        int status;                 /* 0 = 200 */
        char error[160];
        gp_proto_offset *off;
        size_t noff, capoff;
} node_reply;

struct gp_nodes {
        gp_node **v;
        size_t n, cap;
        gp_i64map by_name;          /* FNV-1a of the name -> gp_node* */
        gp_i64map by_uuid;          /* FNV-1a of a GPU uuid -> the node (not left) that has it */
        gp_list by_hb;              /* oldest heartbeat first */
        gp_list unseen;             /* known at start, no sync since: lost at grace_until */
        gp_list held;               /* held syncs, the earliest deadline first */
        jtoken *tok;
        size_t ntok, captok;
        int64_t next_tok;
        bool tok_dirty, index_dirty;
        char (*forgot)[GP_NODE_MAX]; /* left nodes forgotten by this batch: their records are emptied */
        size_t nforgot, capforgot;
        gp_node **dirty;            /* nodes whose record is to be stored */
        size_t ndirty, capdirty;
        gp_node **touched;          /* nodes that got starts or stops since the last flush */
        size_t ntouched, captouched;
        gp_node_ev *ev;
        size_t nev, capev;
        int64_t grace_until;        /* when the nodes still unseen are lost */
        gp_list fencing;            /* lost nodes whose tasks that fence wait for it (nodes-fence.h) */
        gp_pause_clock pause;       /* time the server did not run, held against no node */
        int nrestored;              /* nodes with restored set */
};

#define GP_NODES_MAX_TOKENS 1000 /* join tokens made through the API */

/* nodes-record.c: the stored records.  n's record, and the tokens' (JSON,
 * malloc'd; NULL when out of memory). */
char *gp_node_record(const gp_node *n);
char *gp_nodes_tokens_record(const gp_nodes *ns);
/* A stored record back into n (name already set), or the tokens into ns
 * (appended).  0 or -EINVAL (damaged); the tokens also -ENOMEM. */
int gp_node_from_record(gp_node *n, const char *text);
int gp_nodes_tokens_from_record(gp_nodes *ns, const char *text);
/* n's GPUs become g[0..ng) (copied; not yet in the scheduler: sid
 * UINT32_MAX).  Exits the process (70) when out of memory. */
void gp_node_set_gpus(gp_node *n, const gp_proto_gpu *g, int ng);

/* A node as GET /api/v1/nodes shows it (nodes-run.c).  NULL when out of
 * memory. */
struct json_t;
struct json_t *gp_nodes_node_json(struct gp_daemon *d, const gp_node *n);

#endif
