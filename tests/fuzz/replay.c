/* Replays files through a libFuzzer harness without libFuzzer: the gcc build's regression run
 * over the seed corpora and every crash kept in them. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Reads path whole into a new buffer (*len bytes; the caller frees). Returns NULL on failure. */
static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (grown == NULL) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* Runs one file through the harness. Returns 0, or 1 when it cannot be read. */
static int replay_file(const char *path)
{
    size_t len;
    uint8_t *buf = read_file(path, &len);
    if (buf == NULL) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

/* Runs every regular file of a directory (not recursing), or path itself when it is a file.
 * Returns the number of failures; *ran counts the inputs. */
static int replay_path(const char *path, int *ran)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*ran)++;
        return replay_file(path);
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char sub[4096];
        if (e->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        if (stat(sub, &st) == 0 && S_ISREG(st.st_mode)) {
            (*ran)++;
            bad += replay_file(sub);
        }
    }
    closedir(d);
    return bad;
}

/* Every argument is a corpus directory or one input; a crash aborts under the sanitizers. */
int main(int argc, char **argv)
{
    int ran = 0, bad = 0;
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++)
        bad += replay_path(argv[i], &ran);
    printf("replayed %d inputs, %d unreadable\n", ran, bad);
    return bad != 0 || ran == 0;
}
