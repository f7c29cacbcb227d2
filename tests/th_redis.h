/* Test helper: a real redis-server on 127.0.0.1 and an ephemeral port, plus raw RESP commands. */
#ifndef TH_REDIS_H
#define TH_REDIS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;         /* 0 while stopped */
    int port;          /* kept across th_redis_kill / th_redis_restart */
    char dir[128];     /* working directory (nothing is persisted there) */
    char password[64]; /* requirepass of the running server, "" for none */
    char url[64];      /* "redis://127.0.0.1:PORT" */
} th_redis;

/* Starts redis-server on a free port (retrying with another port if it does not come up), with
 * --requirepass password unless password is NULL. Returns 0 once it answers PING (5 s at most),
 * -1 otherwise (then nothing is left running). The server dies with the test process. */
int th_redis_start(th_redis *s, const char *password);

/* Stops the server (SIGTERM, SIGKILL after 5 s) but keeps the port and directory for
 * th_redis_restart. Returns 0, or -1 if it had to be killed. No-op when stopped. */
int th_redis_kill(th_redis *s);

/* Starts the server again on the same port, empty (no persistence), with --requirepass password
 * unless NULL; stops it first if it runs. Returns 0 once it answers PING (5 s at most), else -1. */
int th_redis_restart(th_redis *s, const char *password);

/* Stops the server and removes its directory. Safe on a zeroed or already stopped th_redis. */
void th_redis_stop(th_redis *s);

/* Sends one command (argc strings) on a fresh connection, authenticating first when the server
 * has a password, and writes the reply into out as text: "+OK", "-ERR ...", ":5", the bulk
 * string itself, "(nil)", or "*N" for arrays (elements not kept). Returns 0, or -1 on an I/O
 * error or after 2 s. */
int th_redis_cmd(const th_redis *s, char *out, size_t outlen, int argc, const char *const *argv);

/* th_redis_cmd for a NULL-terminated list of arguments, the reply discarded; returns 0 when the
 * reply is not an error. */
int th_redis_do(const th_redis *s, ...) __attribute__((sentinel));

#endif
