/* labels.h - node labels ("zone=a,ib=yes") in their one canonical form.
 *
 * A node has at most GP_LABELS_N labels; a key is 1..63 bytes and a value
 * 0..63 bytes of [A-Za-z0-9._/-] (so ',' and '=' never occur inside).  The
 * canonical form is "k=v,k2=v2": sorted by key (bytewise), keys unique, ""
 * for none, shorter than GP_LABELS_MAX.  The config (node.labels), the
 * agent protocol (cluster/proto.h) and the scheduler's node labels all use
 * it.  Pure; thread-safe; allocates nothing. */
#ifndef GP_BASE_LABELS_H
#define GP_BASE_LABELS_H

#include <stdbool.h>
#include <stddef.h>

#define GP_LABELS_MAX 2048      /* bytes of a canonical string, NUL included */
#define GP_LABELS_N 32          /* most labels of one node */
#define GP_LABEL_PART_MAX 63    /* longest key or value */

/* true if s[0..n) is a label key (1..63 bytes) / value (0..63 bytes). */
bool gp_label_key_ok(const char *s, size_t n);
bool gp_label_value_ok(const char *s, size_t n);

/* Canonicalise in ("k=v,..." in any order, "" for none) into out[size].
 * 0, or -EINVAL with a message in err (which label and why; out
 * untouched): a bad key or value, a label without '=', a repeated key,
 * more than GP_LABELS_N labels, or a result that does not fit out. */
int gp_labels_canon(const char *in, char *out, size_t size, char *err, size_t errlen);

/* Walk a canonical string: sets key/value spans of the label at *pos and
 * advances *pos.  true while there is one.  Start with *pos = 0. */
bool gp_labels_next(const char *canon, size_t *pos, const char **ret_key, size_t *ret_klen, const char **ret_val,
                    size_t *ret_vlen);

#endif
