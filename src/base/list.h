/* list.h - an intrusive doubly linked list, written once.
 *
 * A list is a gp_list head; an element embeds a gp_list link and is found
 * again with GP_LIST_ENTRY (container_of).  The head is a sentinel, so no
 * operation has a special case for the first or last element:
 *
 *     typedef struct item { int v; gp_list link; } item;
 *     gp_list q;  gp_list_init(&q);
 *     gp_list_add_tail(&q, &it->link);
 *     GP_LIST_FOR_EACH(l, &q) { item *x = GP_LIST_ENTRY(l, item, link); ... }
 *     gp_list_del(&it->link);            (safe on an unlinked, initialised link)
 *
 * Not thread-safe: the owner of the list serialises access.  No allocation.
 */
#ifndef GP_BASE_LIST_H
#define GP_BASE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct gp_list {
        struct gp_list *prev, *next;
} gp_list;

/* The element of type `type` whose member `member` is the link `ptr`. */
#define GP_LIST_ENTRY(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Walk the links of `head` in order; `l` may not be unlinked in the body
 * (use GP_LIST_FOR_EACH_SAFE for that). */
#define GP_LIST_FOR_EACH(l, head) for (gp_list *l = (head)->next; l != (head); l = l->next)
#define GP_LIST_FOR_EACH_SAFE(l, head)                                                                 \
        for (gp_list *l = (head)->next, *l##_next = l->next; l != (head); l = l##_next, l##_next = l->next)

/* An empty list, or a link that is in no list. */
static inline void gp_list_init(gp_list *h) {
        h->prev = h->next = h;
}

static inline bool gp_list_empty(const gp_list *h) {
        return h->next == h;
}

/* Put `l` (in no list) right after `at` (the head or an element). */
static inline void gp_list_insert_after(gp_list *at, gp_list *l) {
        l->prev = at;
        l->next = at->next;
        at->next->prev = l;
        at->next = l;
}

static inline void gp_list_add_head(gp_list *h, gp_list *l) {
        gp_list_insert_after(h, l);
}

static inline void gp_list_add_tail(gp_list *h, gp_list *l) {
        gp_list_insert_after(h->prev, l);
}

/* Take `l` out of its list and leave it initialised (in no list); a link
 * in no list stays so. */
static inline void gp_list_del(gp_list *l) {
        l->prev->next = l->next;
        l->next->prev = l->prev;
        gp_list_init(l);
}

/* The first / last element's link, or NULL when the list is empty. */
static inline gp_list *gp_list_first(const gp_list *h) {
        return h->next == h ? NULL : h->next;
}

static inline gp_list *gp_list_last(const gp_list *h) {
        return h->prev == h ? NULL : h->prev;
}

#endif
