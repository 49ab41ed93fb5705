/* Reads tensor argv[2] of the cache argv[1], whose payload the test has
 * damaged, and prints the file sz_last_error_file names, after checking
 * that the call fails as corrupt, that the file's size is told and a
 * buffer too small gets no path cut short, that asking for the file
 * leaves the message as it was, and that a failure about no file names
 * none. Exit 0 on success. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "splitzip.h"

int main(int argc, char **argv) {
    char err[512], msg[512], again[512], file[4096], small[4];
    uintptr_t h;
    uint64_t i;
    size_t size = 0;
    sz_tensor t;
    static unsigned char buf[64 << 20];
    if (argc != 3 || sz_open(argv[1], NULL, &h, err, sizeof err) != SZ_OK) {
        fprintf(stderr, "open: %s\n", argc == 3 ? err : "usage: errfile CACHE TENSOR");
        return 1;
    }
    if (sz_last_error_file(h, file, sizeof file, &size) != SZ_OK || file[0] != 0 || size != 1) return 2;
    if (sz_find_name(h, argv[2], &i) != SZ_OK || sz_info(h, i, &t, NULL, 0) != SZ_OK || t.nbytes > sizeof buf) return 3;
    if (sz_read_host(h, i, buf, t.nbytes) != SZ_ERR_CORRUPT) return 4;
    if (sz_last_error(h, msg, sizeof msg) != SZ_OK) return 5;
    if (sz_last_error_file(h, NULL, 0, &size) != SZ_ERR_TOO_SMALL || size < 2) return 6;
    memcpy(small, "xyz", 4);
    if (sz_last_error_file(h, small, sizeof small, NULL) != SZ_ERR_TOO_SMALL || small[0] != 0) return 7;
    if (sz_last_error_file(h, file, size, &size) != SZ_OK || strlen(file) + 1 != size) return 8;
    if (sz_last_error(h, again, sizeof again) != SZ_OK || strcmp(msg, again) != 0) return 9;
    if (sz_last_error_file(0, file, sizeof file, NULL) != SZ_ERR_INVALID) return 10;
    printf("%s\n", file);
    if (sz_find_name(h, "no.such.tensor", &i) != SZ_ERR_NOT_FOUND) return 11;
    if (sz_last_error_file(h, file, sizeof file, NULL) != SZ_OK || file[0] != 0) return 12;
    return sz_close(h) == SZ_OK ? 0 : 13;
}
