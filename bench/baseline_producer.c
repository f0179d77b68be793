/*
 * baseline-producer: the Kafka side of the drain benchmark without
 * PostgreSQL. A plain librdkafka producer sends N messages of S bytes to a
 * topic with the settings pg_outbox's workers use (idempotent, linger.ms=5,
 * murmur2_random partitioner), waits for every acknowledgement, and prints
 * the rate.
 *
 * Build:
 *   cc -O2 -Wall -Wextra -Werror -o baseline-producer baseline_producer.c -lrdkafka
 *
 * Usage:
 *   baseline-producer -b BROKERS -t TOPIC [-n COUNT] [-s BYTES] [-k KEYS]
 *                     [-r RATE [-x TRANSACTIONAL_ID [-l FILE]]]
 *                     [-X name=value]...
 *
 *   -n COUNT   messages to send (default 500000)
 *   -s BYTES   value size (default 200)
 *   -k KEYS    keys "k<i % KEYS>" (default 1000; 0: no key)
 *   -r RATE    send at RATE messages/s, each value the Unix time in
 *              microseconds as decimal text (for latency-consumer); -s is
 *              then ignored
 *   -x ID      with -r: a transactional producer (transactional.id ID) that
 *              works as exactly-once delivery does, one transaction at a
 *              time: it takes every message due, produces them, waits for
 *              their acknowledgements and commits; what falls due meanwhile
 *              waits for the next one. Each value is then the time the
 *              message fell due, so that waiting counts as latency.
 *   -l FILE    with -x: one line per transaction into FILE, "FIRST LAST
 *              COMMITTED": the Unix times in microseconds its first and
 *              last message fell due and its commit returned, so that a
 *              consumer's receive times tell how long committed records
 *              took to become visible (read_committed waits for the
 *              commit markers, written after EndTxn returns)
 *   -S         count the requests sent to the brokers (librdkafka's
 *              statistics, every 200 ms; the last ones after the final
 *              acknowledgement) and print requests=N on the RESULT line
 *   -X         any other librdkafka property, may be repeated
 *
 * Prints one line:
 *   RESULT msgs=N errors=E seconds=T msgs_per_s=R
 * and with -x, on it: transactions=N commit_ms_p50=C ack_ms_p50=A, the
 * median time of a commit (EndTxn alone: the acknowledgements are waited
 * for first) and of that wait.
 * The clock starts after the topic's metadata is known (connections are
 * up) and stops when the last delivery report arrives. Exit status 1 if a
 * message failed.
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

static long delivered = 0;
static long failed = 0;
static long long requests = -1; /* "tx" of the last statistics (-S) */
static int stats_seen = 0;
static char first_error[256] = "";

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m,
                        void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (failed++ == 0)
            snprintf(first_error, sizeof(first_error), "%s",
                     rd_kafka_err2str(m->err));
    } else
        delivered++;
}

/* The statistics' top-level "tx" (requests sent), their last field of that name. */
static int on_statistics(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    const char *found = NULL;

    (void)rk;
    (void)len;
    (void)opaque;
    for (const char *p = json; (p = strstr(p, "\"tx\":")) != NULL; p++)
        found = p;
    if (found)
        requests = atoll(found + 5);
    stats_seen++;
    return 0;
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char errstr[512];

    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
        fprintf(stderr, "baseline-producer: %s=%s: %s\n", name, value, errstr);
        exit(2);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: baseline-producer -b BROKERS -t TOPIC [-n COUNT] "
                    "[-s BYTES] [-k KEYS] [-r RATE [-x TRANSACTIONAL_ID "
                    "[-l FILE]]] [-X name=value]...\n");
    exit(2);
}

/* Sleeps until due (monotonic seconds), serving delivery reports. */
static void wait_until(rd_kafka_t *rk, double due)
{
    double wait;

    /* polling with a 0 timeout below 1 ms would spin a core that the
     * broker and the consumer need */
    while ((wait = due - now_s()) > 0) {
        if (wait >= 0.002)
            rd_kafka_poll(rk, (int)(wait * 1000) - 1);
        else {
            struct timespec nap = {0, (long)(wait * 1e9)};

            nanosleep(&nap, NULL);
        }
    }
}

static void produce(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const char *value,
                    size_t size, long i, long keys)
{
    char key[32];
    int keylen = keys > 0 ? snprintf(key, sizeof(key), "k%ld", i % keys) : 0;

    for (;;) {
        if (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
                             (void *)value, size, keys > 0 ? key : NULL,
                             keylen, NULL) == 0)
            break;
        if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            fprintf(stderr, "baseline-producer: produce: %s\n",
                    rd_kafka_err2str(rd_kafka_last_error()));
            exit(2);
        }
        rd_kafka_poll(rk, 10);
    }
    rd_kafka_poll(rk, 0);
}

/* Microseconds since the epoch, as decimal text, into value. */
static size_t stamp(char *value, double unix_s)
{
    return snprintf(value, 32, "%lld", (long long)(unix_s * 1e6));
}

static double unix_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A failed transactional call ends the run: a floor has no faults. */
static void check(rd_kafka_error_t *error, const char *what)
{
    if (error) {
        fprintf(stderr, "baseline-producer: %s: %s\n", what,
                rd_kafka_error_string(error));
        exit(2);
    }
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(double), compare_double);
    return v[n / 2];
}

/* The plain load: each message produced when due (or at once). */
static void send_plain(rd_kafka_t *rk, rd_kafka_topic_t *rkt, long count,
                       long size, long keys, double rate, double start)
{
    char *value = malloc(size + 32);

    memset(value, 'x', size);
    for (long i = 0; i < count; i++) {
        size_t len = size;

        if (rate > 0) {
            wait_until(rk, start + i / rate);
            len = stamp(value, unix_now());
        }
        produce(rk, rkt, value, len, i, keys);
    }
    free(value);
}

/*
 * One transaction at a time: what is due goes out, then the wait for its
 * acknowledgements and the commit, each timed; their medians into figures.
 */
static void send_transactions(rd_kafka_t *rk, rd_kafka_topic_t *rkt,
                              long count, long keys, double rate,
                              double start, FILE *log, char *figures,
                              size_t room)
{
    double unix_start = unix_now() - (now_s() - start);
    double *commit_ms = malloc(sizeof(double) * count);
    double *ack_ms = malloc(sizeof(double) * count);
    long txns = 0;
    char value[32];

    for (long i = 0; i < count; txns++) {
        double produced, acknowledged;
        long first = i;

        wait_until(rk, start + i / rate);
        check(rd_kafka_begin_transaction(rk), "begin_transaction");
        for (double now = now_s(); i < count && start + i / rate <= now; i++)
            produce(rk, rkt, value, stamp(value, unix_start + i / rate), i,
                    keys);
        produced = now_s();
        while (rd_kafka_outq_len(rk) > 0)
            rd_kafka_flush(rk, 1000);
        acknowledged = now_s();
        check(rd_kafka_commit_transaction(rk, -1), "commit_transaction");
        ack_ms[txns] = (acknowledged - produced) * 1000;
        commit_ms[txns] = (now_s() - acknowledged) * 1000;
        if (log)
            fprintf(log, "%lld %lld %lld\n",
                    (long long)((unix_start + first / rate) * 1e6),
                    (long long)((unix_start + (i - 1) / rate) * 1e6),
                    (long long)(unix_now() * 1e6));
    }
    snprintf(figures, room, " transactions=%ld commit_ms_p50=%.3f ack_ms_p50=%.3f",
             txns, median(commit_ms, txns), median(ack_ms, txns));
    free(commit_ms);
    free(ack_ms);
}

/* Connections up and partitions known before the clock starts. */
static void wait_for_metadata(rd_kafka_t *rk, rd_kafka_topic_t *rkt,
                              const char *topic)
{
    for (int i = 0; i < 100; i++) {
        const struct rd_kafka_metadata *md = NULL;
        int ok = rd_kafka_metadata(rk, 0, rkt, &md, 5000) ==
                     RD_KAFKA_RESP_ERR_NO_ERROR &&
                 md->topic_cnt == 1 && md->topics[0].partition_cnt > 0 &&
                 md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR;

        if (md)
            rd_kafka_metadata_destroy(md);
        if (ok)
            return;
        usleep(100 * 1000);
    }
    fprintf(stderr, "baseline-producer: no metadata for %s\n", topic);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *brokers = NULL;
    const char *topic = NULL;
    const char *transactional_id = NULL;
    const char *log_path = NULL;
    FILE *log = NULL;
    long count = 500000;
    long size = 200;
    long keys = 1000;
    double rate = 0;
    int count_requests = 0;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    char errstr[512];
    char figures[128] = "";
    double start, elapsed;
    int opt;

    set(conf, "enable.idempotence", "true");
    set(conf, "linger.ms", "5");
    set(conf, "partitioner", "murmur2_random");
    while ((opt = getopt(argc, argv, "b:t:n:s:k:r:x:l:SX:")) != -1) {
        switch (opt) {
        case 'b':
            brokers = optarg;
            break;
        case 't':
            topic = optarg;
            break;
        case 'n':
            count = strtol(optarg, NULL, 10);
            break;
        case 's':
            size = strtol(optarg, NULL, 10);
            break;
        case 'k':
            keys = strtol(optarg, NULL, 10);
            break;
        case 'r':
            rate = strtod(optarg, NULL);
            break;
        case 'x':
            transactional_id = optarg;
            break;
        case 'l':
            log_path = optarg;
            break;
        case 'S':
            count_requests = 1;
            break;
        case 'X': {
            char *eq = strchr(optarg, '=');

            if (!eq)
                usage();
            *eq = '\0';
            set(conf, optarg, eq + 1);
            break;
        }
        default:
            usage();
        }
    }
    if (!brokers || !topic || count <= 0 || size < 0 || keys < 0 || rate < 0 ||
        (transactional_id && rate == 0) || (log_path && !transactional_id))
        usage();
    if (log_path && !(log = fopen(log_path, "w"))) {
        fprintf(stderr, "baseline-producer: %s: %s\n", log_path, strerror(errno));
        return 2;
    }
    set(conf, "bootstrap.servers", brokers);
    if (transactional_id)
        set(conf, "transactional.id", transactional_id);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    if (count_requests) {
        set(conf, "statistics.interval.ms", "200");
        rd_kafka_conf_set_stats_cb(conf, on_statistics);
    }

    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "baseline-producer: %s\n", errstr);
        return 2;
    }
    rkt = rd_kafka_topic_new(rk, topic, NULL);
    wait_for_metadata(rk, rkt, topic);
    if (transactional_id)
        check(rd_kafka_init_transactions(rk, 60000), "init_transactions");

    start = now_s();
    if (transactional_id)
        send_transactions(rk, rkt, count, keys, rate, start, log, figures,
                          sizeof(figures));
    else
        send_plain(rk, rkt, count, size, keys, rate, start);
    while (delivered + failed < count)
        rd_kafka_flush(rk, 1000);
    elapsed = now_s() - start;
    if (count_requests) {
        /* statistics taken after the last acknowledgement */
        int seen = stats_seen;
        double until = now_s() + 1;

        while ((stats_seen < seen + 2) && now_s() < until)
            rd_kafka_poll(rk, 50);
        snprintf(figures + strlen(figures), sizeof(figures) - strlen(figures),
                 " requests=%lld", requests);
    }

    printf("RESULT msgs=%ld errors=%ld seconds=%.3f msgs_per_s=%.0f%s\n",
           delivered, failed, elapsed, delivered / elapsed, figures);
    if (failed)
        fprintf(stderr, "baseline-producer: %ld failed, first: %s\n", failed,
                first_error);
    if (log && fclose(log) != 0) {
        fprintf(stderr, "baseline-producer: %s: %s\n", log_path, strerror(errno));
        return 2;
    }
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return failed ? 1 : 0;
}
