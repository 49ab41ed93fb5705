/* Reads every tensor from several threads at once through one handle and
 * checks that every thread sees the same bytes, and that each thread's
 * sz_last_error is its own failure's, not another thread's. Exit 0 on
 * success. */
#define _POSIX_C_SOURCE 200112L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "splitzip.h"

#define THREADS 8

static uintptr_t h;
static uint64_t n;
static uint64_t sums[THREADS][4096];
static pthread_barrier_t barrier;

static uint64_t fnv1a(const unsigned char *p, uint64_t len) {
    uint64_t x = 14695981039346656037ull;
    for (uint64_t i = 0; i < len; i++) {
        x ^= p[i];
        x *= 1099511628211ull;
    }
    return x;
}

static void *work(void *arg) {
    int id = (int)(intptr_t)arg;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = (k + (uint64_t)id * 7) % n; /* different orders */
        sz_tensor t;
        if (sz_info(h, i, &t, NULL, 0) != SZ_OK) return (void *)1;
        unsigned char *buf = malloc(t.nbytes ? t.nbytes : 1);
        if (sz_read_host(h, i, buf, t.nbytes) != SZ_OK) return (void *)1;
        sums[id][i] = fnv1a(buf, t.nbytes);
        free(buf);
    }
    pthread_barrier_wait(&barrier); /* all threads fail at once */
    for (int j = 0; j < 2000; j++) {
        char name[64], msg[512];
        uint64_t idx;
        snprintf(name, sizeof name, "missing.thread%d.%d", id, j);
        if (sz_find_name(h, name, &idx) != SZ_ERR_NOT_FOUND) return (void *)1;
        if (sz_last_error(h, msg, sizeof msg) != SZ_OK || strstr(msg, name) == NULL) {
            fprintf(stderr, "thread %d: last error %s, want one naming %s\n", id, msg, name);
            return (void *)1;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    char err[512];
    if (argc != 2 || sz_open(argv[1], NULL, &h, err, sizeof err) != SZ_OK) {
        fprintf(stderr, "open: %s\n", argc == 2 ? err : "usage");
        return 1;
    }
    sz_count(h, &n);
    if (n > 4096) return 1;
    pthread_barrier_init(&barrier, NULL, THREADS);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, work, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(th[i], &r);
        if (r) {
            fprintf(stderr, "thread %d failed\n", i);
            return 1;
        }
    }
    for (int i = 1; i < THREADS; i++)
        for (uint64_t k = 0; k < n; k++)
            if (sums[i][k] != sums[0][k]) {
                fprintf(stderr, "thread %d saw different bytes for tensor %llu\n", i, (unsigned long long)k);
                return 1;
            }
    sz_close(h);
    printf("%d threads read %llu tensors each: identical\n", THREADS, (unsigned long long)n);
    return 0;
}
