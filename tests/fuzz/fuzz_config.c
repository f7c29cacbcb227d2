/* Fuzzes option parsing (rd_config_parse) from a command line and an environment, and the size
 * parser behind every size option. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "units.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_WORDS 32

/* The input is NUL-separated words: the first byte says how many of them (mod 8) form the
 * environment ("RINGD_X=value"), the rest follow argv[0] on the command line. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (sink == NULL && (sink = fopen("/dev/null", "w")) == NULL)
        return 0;
    if (size < 1)
        return 0;
    rd_log_set_level(RD_LOG_ERROR);
    size_t nenv = data[0] % 8;
    char *text = malloc(size); /* the words, NUL-terminated, after the first byte */
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';

    char *words[MAX_WORDS];
    size_t nwords = 0;
    for (size_t i = 0; i + 1 < size && nwords < MAX_WORDS;) {
        words[nwords++] = text + i;
        i += strlen(text + i) + 1;
    }
    char *envp[MAX_WORDS + 1], *argv[MAX_WORDS + 2];
    size_t ne = 0;
    int argc = 0;
    argv[argc++] = "ringd";
    for (size_t i = 0; i < nwords; i++) {
        if (i < nenv)
            envp[ne++] = words[i];
        else
            argv[argc++] = words[i];
        uint64_t v;
        (void)rd_units_parse_size(words[i], &v);
    }
    envp[ne] = NULL;
    argv[argc] = NULL;

    rd_config cfg;
    char err[512];
    if (rd_config_parse(&cfg, argc, argv, envp, sink, err, sizeof(err)) == RD_CONFIG_RUN) {
        if (memchr(cfg.socket_path, '\0', sizeof(cfg.socket_path)) == NULL ||
            memchr(cfg.node, '\0', sizeof(cfg.node)) == NULL || cfg.arena_size > cfg.arena_max)
            abort();
        rd_config_dump(&cfg);
    }
    free(text);
    return 0;
}
