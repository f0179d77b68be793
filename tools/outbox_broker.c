/*
 * outbox-broker: a throw-away Kafka cluster for pg_outbox tests and the demo.
 *
 * It runs librdkafka's mock cluster (librdkafka 2.0.2) in one process, so
 * tests need no JVM, no ZooKeeper and no network beyond 127.0.0.1, and it
 * takes fault-injection commands on stdin so a test can break the cluster
 * at exactly the moment it wants.
 *
 * Build:
 *   cc -O2 -Wall -Wextra -Werror -o tools/outbox-broker tools/outbox_broker.c \
 *      -lrdkafka -lpthread
 *
 * Usage:
 *   outbox-broker [--brokers N] [--topic NAME:PARTITIONS]...
 *                 [--bootstrap-file PATH]
 *
 *   --brokers N              number of brokers, ids 1..N (default 3)
 *   --topic NAME:PARTITIONS  create a topic up front, replication factor
 *                            min(N, 3); may be repeated
 *   --bootstrap-file PATH    also write the bootstrap list to PATH, one
 *                            newline-terminated line, replaced atomically
 *                            (tmp file + rename) once the brokers listen
 *
 * Once the brokers listen it prints exactly one line to stdout:
 *   BOOTSTRAP host:port,host:port,...
 * The ports are chosen by the kernel (2.0.2 cannot pick them), so read them
 * from this line or the file. A broker keeps its port across down/up.
 *
 * Then it reads one command per line from stdin and answers each with one
 * line, "OK" or "ERR <message>". Blank lines are ignored. End of stdin does
 * not stop it, so it can run in the background with stdin=/dev/null; it
 * stops cleanly (exit 0) on SIGTERM, SIGINT or "quit".
 *
 *   ping                          -> OK
 *   down <broker-id|all>          broker closes its connections, refuses new
 *   up <broker-id|all>            broker accepts connections again
 *   produce-errors <count> <err>  the next <count> Produce requests, on any
 *                                 broker, fail with <err>
 *   request-errors <api-key> <count> <err>
 *                                 the same for requests of a numeric API key
 *                                 (11: JoinGroup, 10: FindCoordinator, ...)
 *   topic-error <topic> <err>     Metadata reports <err> for <topic>;
 *                                 NO_ERROR clears it
 *   create <topic> <partitions>   create a topic, replication factor min(N,3)
 *   leader <topic> <partition> <broker-id|-1>
 *                                 move a partition's leader (-1: no leader)
 *   rtt <broker-id|all> <ms>      delay every response of a broker
 *   quit                          exit 0
 *
 * <err> is a librdkafka error name without the RD_KAFKA_RESP_ERR_ prefix
 * (NOT_LEADER_FOR_PARTITION, MSG_SIZE_TOO_LARGE, INVALID_RECORD,
 * TOPIC_AUTHORIZATION_FAILED, REQUEST_TIMED_OUT, _TRANSPORT, ...) or its
 * numeric code. _TRANSPORT makes the broker drop the client's connection.
 *
 * Facts about the 2.0.2 mock cluster that tests must design around
 * (checked with kcat 1.7.1 and librdkafka 2.0.2 clients):
 * - A topic that was not created beforehand is created with 4 partitions
 *   and replication factor min(N, 3) as soon as any Metadata request names
 *   it: a producer's first message, a consumer, even "kcat -L -t NAME".
 *   The client's allow.auto.create.topics=false does not prevent it; only
 *   an all-topics request (plain "kcat -L") creates nothing. The count 4 is
 *   hard-coded when the cluster is made; no API call or configuration
 *   property changes it ("test.mock.num.brokers" only sizes a mock cluster
 *   that a client starts for itself). Create topics explicitly whenever the
 *   partition count matters.
 * - "leader" on an unknown topic creates it with <partition>+1 partitions.
 * - topic-error only changes Metadata responses. A producer that already
 *   knows the topic keeps producing; a new producer never learns the
 *   partitions and its messages fail with _MSG_TIMED_OUT after
 *   message.timeout.ms. To see TOPIC_AUTHORIZATION_FAILED in a delivery
 *   report, use "produce-errors 1 TOPIC_AUTHORIZATION_FAILED".
 * - Each partition keeps only about the last 5 MiB of records.
 * - The mock leaves Nagle's algorithm on for the connections it accepts, so
 *   a second response queued behind a first waits for the client's delayed
 *   ACK: every batch spread over several partitions took 40+ ms. Real Kafka
 *   brokers set TCP_NODELAY; this program does the same by wrapping
 *   accept()/accept4(), which librdkafka resolves to ours.
 * - Without a transactional.id the mock does not check idempotent sequence
 *   numbers. When an injected error fails one Produce request while a later
 *   one of the same partition succeeds, the producer takes the later
 *   success as proof the earlier messages were stored (as a real broker's
 *   sequence check would make it) and reports them delivered: they are
 *   lost. Tests that inject produce errors keep one request in flight per
 *   partition, or count on loss; "down"/"up" and "rtt" are safe.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static void set_nodelay(int fd)
{
    int one = 1;

    if (fd >= 0)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    int (*real)(int, struct sockaddr *, socklen_t *) =
        (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
    int conn = real(fd, addr, len);

    set_nodelay(conn);
    return conn;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    int (*real)(int, struct sockaddr *, socklen_t *, int) =
        (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    int conn = real(fd, addr, len, flags);

    set_nodelay(conn);
    return conn;
}

/* The Kafka ApiKey of Produce; librdkafka keeps its RD_KAFKAP_* names in a
 * private header. */
#define KAFKA_API_PRODUCE 0

#define MAX_BROKERS 64
#define MAX_TOPICS 64
#define MAX_ARGS 3 /* "leader" takes the most */
#define ALL_BROKERS (-1)

/* Kafka caps topic names at 249 characters. */
struct topic_spec {
    char name[250];
    int partitions;
};

struct options {
    int brokers;
    const char *bootstrap_file;
    struct topic_spec topics[MAX_TOPICS];
    int topic_cnt;
};

struct broker {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mcluster;
    int broker_cnt;
    bool quit;
};

struct line_buf {
    char text[1024];
    size_t len;
    bool too_long;
};

typedef void (*command_fn)(struct broker *b, char **args);

struct command {
    const char *name;
    int argc;
    const char *usage;
    command_fn run;
};

/* Written by the signal handler, so the poll() loop wakes up even if the
 * signal lands just before it blocks. */
static int signal_pipe[2] = {-1, -1};

static void reply(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    /* A test waits for each answer before its next step. */
    fflush(stdout);
}

static void reply_result(rd_kafka_resp_err_t err)
{
    if (err)
        reply("ERR %s: %s", rd_kafka_err2name(err), rd_kafka_err2str(err));
    else
        reply("OK");
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_error(const char *s, rd_kafka_resp_err_t *out)
{
    static const char prefix[] = "RD_KAFKA_RESP_ERR_";
    const struct rd_kafka_err_desc *descs;
    size_t cnt;
    long code;

    if (parse_long(s, INT16_MIN, INT16_MAX, &code)) {
        *out = (rd_kafka_resp_err_t)code;
        return true;
    }
    if (strncmp(s, prefix, sizeof(prefix) - 1) == 0)
        s += sizeof(prefix) - 1;
    rd_kafka_get_err_descs(&descs, &cnt);
    for (size_t i = 0; i < cnt; i++) {
        if (descs[i].name && strcmp(descs[i].name, s) == 0) {
            *out = descs[i].code;
            return true;
        }
    }
    return false;
}

static bool parse_broker_id(const struct broker *b, const char *s,
                            int32_t *out)
{
    long id;

    if (strcmp(s, "all") == 0) {
        *out = ALL_BROKERS;
        return true;
    }
    if (!parse_long(s, 1, b->broker_cnt, &id))
        return false;
    *out = (int32_t)id;
    return true;
}

static int replication_factor(const struct broker *b)
{
    return b->broker_cnt < 3 ? b->broker_cnt : 3;
}

static void cmd_ping(struct broker *b, char **args)
{
    (void)b;
    (void)args;
    reply("OK");
}

static void cmd_quit(struct broker *b, char **args)
{
    (void)args;
    b->quit = true;
    reply("OK");
}

static void cmd_down(struct broker *b, char **args)
{
    int32_t id;

    if (!parse_broker_id(b, args[0], &id))
        reply("ERR bad broker id '%s' (1..%d or all)", args[0], b->broker_cnt);
    else
        reply_result(rd_kafka_mock_broker_set_down(b->mcluster, id));
}

static void cmd_up(struct broker *b, char **args)
{
    int32_t id;

    if (!parse_broker_id(b, args[0], &id))
        reply("ERR bad broker id '%s' (1..%d or all)", args[0], b->broker_cnt);
    else
        reply_result(rd_kafka_mock_broker_set_up(b->mcluster, id));
}

static void cmd_rtt(struct broker *b, char **args)
{
    int32_t id;
    long ms;

    if (!parse_broker_id(b, args[0], &id))
        reply("ERR bad broker id '%s' (1..%d or all)", args[0], b->broker_cnt);
    else if (!parse_long(args[1], 0, INT_MAX, &ms))
        reply("ERR bad rtt '%s'", args[1]);
    else
        reply_result(rd_kafka_mock_broker_set_rtt(b->mcluster, id, (int)ms));
}

/* The next <count> requests of one API key fail with <err>. */
static void push_errors(struct broker *b, int16_t api_key, const char *count,
                        const char *error)
{
    rd_kafka_resp_err_t err, *errs;
    long cnt;

    if (!parse_long(count, 1, 1000000, &cnt)) {
        reply("ERR bad count '%s' (1..1000000)", count);
        return;
    }
    if (!parse_error(error, &err)) {
        reply("ERR unknown error '%s'", error);
        return;
    }
    errs = malloc((size_t)cnt * sizeof(*errs));
    if (!errs) {
        reply("ERR out of memory");
        return;
    }
    for (long i = 0; i < cnt; i++)
        errs[i] = err;
    rd_kafka_mock_push_request_errors_array(b->mcluster, api_key,
                                            (size_t)cnt, errs);
    free(errs);
    reply("OK");
}

static void cmd_produce_errors(struct broker *b, char **args)
{
    push_errors(b, KAFKA_API_PRODUCE, args[0], args[1]);
}

static void cmd_request_errors(struct broker *b, char **args)
{
    long api_key;

    if (!parse_long(args[0], 0, INT16_MAX, &api_key))
        reply("ERR bad API key '%s'", args[0]);
    else
        push_errors(b, (int16_t)api_key, args[1], args[2]);
}

static void cmd_topic_error(struct broker *b, char **args)
{
    rd_kafka_resp_err_t err;

    if (!parse_error(args[1], &err)) {
        reply("ERR unknown error '%s'", args[1]);
        return;
    }
    rd_kafka_mock_topic_set_error(b->mcluster, args[0], err);
    reply("OK");
}

static void cmd_create(struct broker *b, char **args)
{
    long partitions;

    if (!parse_long(args[1], 1, INT_MAX, &partitions))
        reply("ERR bad partition count '%s'", args[1]);
    else
        reply_result(rd_kafka_mock_topic_create(b->mcluster, args[0],
                                                (int)partitions,
                                                replication_factor(b)));
}

static void cmd_leader(struct broker *b, char **args)
{
    long partition, id;

    if (!parse_long(args[1], 0, INT32_MAX, &partition))
        reply("ERR bad partition '%s'", args[1]);
    else if (!parse_long(args[2], -1, b->broker_cnt, &id) || id == 0)
        reply("ERR bad broker id '%s' (1..%d or -1)", args[2], b->broker_cnt);
    else
        reply_result(rd_kafka_mock_partition_set_leader(
            b->mcluster, args[0], (int32_t)partition, (int32_t)id));
}

static const struct command commands[] = {
    {"ping", 0, "ping", cmd_ping},
    {"down", 1, "down <broker-id|all>", cmd_down},
    {"up", 1, "up <broker-id|all>", cmd_up},
    {"produce-errors", 2, "produce-errors <count> <error>",
     cmd_produce_errors},
    {"request-errors", 3, "request-errors <api-key> <count> <error>",
     cmd_request_errors},
    {"topic-error", 2, "topic-error <topic> <error>", cmd_topic_error},
    {"create", 2, "create <topic> <partitions>", cmd_create},
    {"leader", 3, "leader <topic> <partition> <broker-id|-1>", cmd_leader},
    {"rtt", 2, "rtt <broker-id|all> <ms>", cmd_rtt},
    {"quit", 0, "quit", cmd_quit},
};

static void run_command(struct broker *b, char *line)
{
    char *words[MAX_ARGS + 2];
    int n = 0;

    for (char *w = strtok(line, " \t\r"); w; w = strtok(NULL, " \t\r")) {
        /* Keep one slot past the longest command to notice extra words. */
        if (n == MAX_ARGS + 2)
            break;
        words[n++] = w;
    }
    if (n == 0)
        return;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        const struct command *c = &commands[i];

        if (strcmp(c->name, words[0]) != 0)
            continue;
        if (n - 1 != c->argc)
            reply("ERR usage: %s", c->usage);
        else
            c->run(b, &words[1]);
        return;
    }
    reply("ERR unknown command '%s'", words[0]);
}

static void finish_line(struct broker *b, struct line_buf *lb)
{
    lb->text[lb->len] = '\0';
    if (lb->too_long)
        reply("ERR line too long");
    else
        run_command(b, lb->text);
    lb->len = 0;
    lb->too_long = false;
}

/* Commands are split by hand rather than with stdio so that poll() sees
 * exactly what is still unread and never blocks on a half line. */
static void feed_input(struct broker *b, struct line_buf *lb,
                       const char *data, size_t n)
{
    for (size_t i = 0; i < n && !b->quit; i++) {
        if (data[i] == '\n')
            finish_line(b, lb);
        else if (lb->len < sizeof(lb->text) - 1)
            lb->text[lb->len++] = data[i];
        else
            lb->too_long = true;
    }
}

static void on_signal(int sig)
{
    int saved_errno = errno;
    ssize_t r;

    (void)sig;
    r = write(signal_pipe[1], "x", 1);
    (void)r; /* a full pipe already holds a wake-up */
    errno = saved_errno;
}

static bool install_signal_handlers(void)
{
    struct sigaction sa;
    bool ok;

    if (pipe(signal_pipe) != 0 ||
        fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK) != 0) {
        perror("outbox-broker: signal pipe");
        return false;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ok = sigaction(SIGTERM, &sa, NULL) == 0 &&
         sigaction(SIGINT, &sa, NULL) == 0;
    /* Clients may still use the cluster after whoever reads our answers
     * has gone; a failed reply must not kill it. */
    sa.sa_handler = SIG_IGN;
    ok = ok && sigaction(SIGPIPE, &sa, NULL) == 0;
    if (!ok)
        perror("outbox-broker: sigaction");
    return ok;
}

/* Returns when a signal arrives or "quit" is read; end of input only stops
 * the reading. */
static void serve(struct broker *b)
{
    struct line_buf lb = {.len = 0, .too_long = false};
    struct pollfd fds[2] = {
        {.fd = STDIN_FILENO, .events = POLLIN},
        {.fd = signal_pipe[0], .events = POLLIN},
    };
    char chunk[4096];

    while (!b->quit) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            perror("outbox-broker: poll");
            return;
        }
        if (fds[1].revents)
            return;
        if (!fds[0].revents)
            continue;
        ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
        if (n > 0) {
            feed_input(b, &lb, chunk, (size_t)n);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            if (lb.len > 0 || lb.too_long)
                finish_line(b, &lb);
            fds[0].fd = -1; /* poll() skips negative descriptors */
        }
    }
}

static bool parse_topic_spec(const char *arg, struct topic_spec *t)
{
    const char *colon = strrchr(arg, ':');
    size_t name_len = colon ? (size_t)(colon - arg) : 0;
    long partitions;

    if (name_len == 0 || name_len >= sizeof(t->name) ||
        !parse_long(colon + 1, 1, INT_MAX, &partitions))
        return false;
    memcpy(t->name, arg, name_len);
    t->name[name_len] = '\0';
    t->partitions = (int)partitions;
    return true;
}

static void usage(void)
{
    fprintf(stderr, "usage: outbox-broker [--brokers N] "
                    "[--topic NAME:PARTITIONS]... [--bootstrap-file PATH]\n");
}

static bool parse_options(int argc, char **argv, struct options *opt)
{
    long brokers;

    opt->brokers = 3;
    opt->bootstrap_file = NULL;
    opt->topic_cnt = 0;
    /* Every option takes a value. */
    for (int i = 1; i < argc; i += 2) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;

        if (!value) {
            usage();
            return false;
        }
        if (strcmp(argv[i], "--brokers") == 0 &&
            parse_long(value, 1, MAX_BROKERS, &brokers)) {
            opt->brokers = (int)brokers;
        } else if (strcmp(argv[i], "--topic") == 0 &&
                   opt->topic_cnt < MAX_TOPICS &&
                   parse_topic_spec(value, &opt->topics[opt->topic_cnt])) {
            opt->topic_cnt++;
        } else if (strcmp(argv[i], "--bootstrap-file") == 0) {
            opt->bootstrap_file = value;
        } else {
            fprintf(stderr, "outbox-broker: bad option %s %s\n", argv[i],
                    value);
            usage();
            return false;
        }
    }
    return true;
}

/* The mock cluster's thread keeps the signal mask of the thread that
 * creates it, unlike librdkafka's other threads; with every signal blocked
 * here, SIGTERM and SIGINT can only be delivered to the main thread. */
static bool start_cluster(struct broker *b, int broker_cnt)
{
    char errstr[512];
    sigset_t all, saved;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();

    b->broker_cnt = broker_cnt;
    b->quit = false;
    b->mcluster = NULL;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    b->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!b->rk) {
        rd_kafka_conf_destroy(conf);
        fprintf(stderr, "outbox-broker: %s\n", errstr);
    } else {
        b->mcluster = rd_kafka_mock_cluster_new(b->rk, broker_cnt);
        if (!b->mcluster) {
            fprintf(stderr, "outbox-broker: cannot create mock cluster\n");
            rd_kafka_destroy(b->rk);
        }
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return b->mcluster != NULL;
}

static void stop_cluster(struct broker *b)
{
    rd_kafka_mock_cluster_destroy(b->mcluster);
    rd_kafka_destroy(b->rk);
}

static bool create_topics(struct broker *b, const struct options *opt)
{
    for (int i = 0; i < opt->topic_cnt; i++) {
        const struct topic_spec *t = &opt->topics[i];
        rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(
            b->mcluster, t->name, t->partitions, replication_factor(b));

        if (err) {
            fprintf(stderr, "outbox-broker: create topic %s: %s\n", t->name,
                    rd_kafka_err2str(err));
            return false;
        }
    }
    return true;
}

/* Written to a temporary name and renamed, so a reader polling for the
 * file never sees it half written. */
static bool write_bootstrap_file(const char *path, const char *bootstraps)
{
    size_t len = strlen(path) + sizeof(".tmp");
    char *tmp = malloc(len);
    FILE *f;
    bool ok;

    if (!tmp)
        return false;
    snprintf(tmp, len, "%s.tmp", path);
    f = fopen(tmp, "w");
    ok = f != NULL;
    if (ok) {
        ok = fprintf(f, "%s\n", bootstraps) > 0;
        ok = fclose(f) == 0 && ok;
        ok = ok && rename(tmp, path) == 0;
    }
    if (!ok) {
        fprintf(stderr, "outbox-broker: cannot write %s: %s\n", path,
                strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return ok;
}

int main(int argc, char **argv)
{
    struct options opt;
    struct broker b;
    const char *bootstraps;
    bool ok;

    if (!parse_options(argc, argv, &opt))
        return 2;
    if (!start_cluster(&b, opt.brokers))
        return 1;
    bootstraps = rd_kafka_mock_cluster_bootstraps(b.mcluster);
    ok = create_topics(&b, &opt) && install_signal_handlers() &&
         (!opt.bootstrap_file ||
          write_bootstrap_file(opt.bootstrap_file, bootstraps));
    if (ok) {
        reply("BOOTSTRAP %s", bootstraps);
        serve(&b);
    }
    stop_cluster(&b);
    return ok ? 0 : 1;
}
