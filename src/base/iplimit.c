/* iplimit.c - open connections per client address (iplimit.h). */
#include "base/iplimit.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/util.h"

struct gp_ipslot {
        uint8_t key[16];           /* IPv6, or IPv4 mapped (::ffff:a.b.c.d) */
        uint32_t count;            /* open connections; 0 = a free slot */
};

static uint64_t ip_seed; /* keys the hash: an outsider cannot pick addresses that collide */

static bool ip_key(const struct sockaddr *sa, uint8_t key[16]) {
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
                memset(key, 0, 10);
                key[10] = key[11] = 0xff;
                memcpy(key + 12, &s4->sin_addr, 4);
                return true;
        }
        if (sa->sa_family == AF_INET6) {
                memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
                return true;
        }
        return false; /* a relay's socketpair: not a client address */
}

static size_t ip_hash(const uint8_t key[16]) {
        uint64_t h = 1469598103934665603ULL ^ ip_seed;
        for (int i = 0; i < 16; i++) {
                h ^= key[i];
                h *= 1099511628211ULL;
        }
        return (size_t)(h ^ (h >> 29));
}

int gp_iplimit_init(gp_iplimit *l, int per_ip, int max_connections) {
        pthread_mutex_init(&l->mu, NULL);
        l->per_ip = per_ip;
        if (!ip_seed && getrandom(&ip_seed, sizeof(ip_seed), GRND_NONBLOCK) != sizeof(ip_seed))
                ip_seed = (uint64_t)gp_mono_ms() * 0x9e3779b97f4a7c15ULL;
        /* every open connection holds at most one slot: at most half full */
        size_t cap = 64;
        while (cap < 2 * ((size_t)max_connections + 64))
                cap *= 2;
        l->t = calloc(cap, sizeof(gp_ipslot));
        if (!l->t)
                return -ENOMEM;
        l->cap = cap;
        return 0;
}

void gp_iplimit_done(gp_iplimit *l) {
        if (!l->cap && !l->t)
                return; /* zeroed: never initialised */
        free(l->t);
        l->t = NULL;
        l->cap = 0;
        pthread_mutex_destroy(&l->mu);
}

int gp_iplimit_take(gp_iplimit *l, const struct sockaddr *sa) {
        uint8_t key[16];
        if (!l->t || !ip_key(sa, key))
                return 1;
        int rc = 1;
        size_t mask = l->cap - 1;
        pthread_mutex_lock(&l->mu);
        for (size_t i = ip_hash(key) & mask, n = 0; n < l->cap; i = (i + 1) & mask, n++) {
                gp_ipslot *s = &l->t[i];
                if (!s->count) {
                        memcpy(s->key, key, 16);
                        s->count = 1;
                        rc = 0;
                        break;
                }
                if (!memcmp(s->key, key, 16)) {
                        if (s->count >= (uint32_t)l->per_ip) {
                                rc = -EMFILE;
                        } else {
                                s->count++;
                                rc = 0;
                        }
                        break;
                }
        }
        pthread_mutex_unlock(&l->mu);
        return rc; /* a full table (cannot happen: see gp_iplimit_init) counts nothing */
}

void gp_iplimit_put(gp_iplimit *l, const struct sockaddr *sa) {
        uint8_t key[16];
        if (!l->t || !ip_key(sa, key))
                return;
        size_t mask = l->cap - 1;
        pthread_mutex_lock(&l->mu);
        size_t i = ip_hash(key) & mask, n = 0;
        while (n < l->cap && l->t[i].count && memcmp(l->t[i].key, key, 16)) {
                i = (i + 1) & mask;
                n++;
        }
        if (n < l->cap && l->t[i].count && --l->t[i].count == 0) {
                /* free slot i by shifting back the entries after it that probed past it */
                size_t j = i;
                for (;;) {
                        j = (j + 1) & mask;
                        if (!l->t[j].count)
                                break;
                        size_t k = ip_hash(l->t[j].key) & mask;
                        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
                        if (stays)
                                continue;
                        l->t[i] = l->t[j];
                        i = j;
                }
                l->t[i].count = 0;
        }
        pthread_mutex_unlock(&l->mu);
}
