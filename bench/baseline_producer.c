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
 *                     [-r RATE] [-X name=value]...
 *
 *   -n COUNT   messages to send (default 500000)
 *   -s BYTES   value size (default 200)
 *   -k KEYS    keys "k<i % KEYS>" (default 1000; 0: no key)
 *   -r RATE    send at RATE messages/s, each value the Unix time in
 *              microseconds as decimal text (for latency-consumer); -s is
 *              then ignored
 *   -X         any other librdkafka property, may be repeated
 *
 * Prints one line:
 *   RESULT msgs=N errors=E seconds=T msgs_per_s=R
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
                    "[-s BYTES] [-k KEYS] [-r RATE] [-X name=value]...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *brokers = NULL;
    const char *topic = NULL;
    long count = 500000;
    long size = 200;
    long keys = 1000;
    double rate = 0;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    const struct rd_kafka_metadata *md = NULL;
    char errstr[512];
    char *value;
    double start, elapsed;
    int opt;

    set(conf, "enable.idempotence", "true");
    set(conf, "linger.ms", "5");
    set(conf, "partitioner", "murmur2_random");
    while ((opt = getopt(argc, argv, "b:t:n:s:k:r:X:")) != -1) {
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
    if (!brokers || !topic || count <= 0 || size < 0 || keys < 0 || rate < 0)
        usage();
    set(conf, "bootstrap.servers", brokers);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);

    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "baseline-producer: %s\n", errstr);
        return 2;
    }
    rkt = rd_kafka_topic_new(rk, topic, NULL);
    /* connections up and partitions known before the clock starts */
    for (int i = 0; i < 100; i++) {
        if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) ==
                RD_KAFKA_RESP_ERR_NO_ERROR &&
            md->topic_cnt == 1 && md->topics[0].partition_cnt > 0 &&
            md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
            break;
        if (md)
            rd_kafka_metadata_destroy(md);
        md = NULL;
        usleep(100 * 1000);
    }
    if (!md) {
        fprintf(stderr, "baseline-producer: no metadata for %s\n", topic);
        return 2;
    }
    rd_kafka_metadata_destroy(md);

    value = malloc(size + 32);
    memset(value, 'x', size);
    start = now_s();
    for (long i = 0; i < count; i++) {
        char key[32];
        int keylen = keys > 0 ? snprintf(key, sizeof(key), "k%ld", i % keys) : 0;

        if (rate > 0) {
            double due = start + i / rate;
            double wait;
            struct timespec ts;

            /* sleep until due: polling with a 0 timeout below 1 ms
             * would spin a core that the broker and the consumer need */
            while ((wait = due - now_s()) > 0) {
                if (wait >= 0.002)
                    rd_kafka_poll(rk, (int)(wait * 1000) - 1);
                else {
                    struct timespec nap = {0, (long)(wait * 1e9)};

                    nanosleep(&nap, NULL);
                }
            }
            clock_gettime(CLOCK_REALTIME, &ts);
            size = snprintf(value, 32, "%lld",
                            (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
        }

        for (;;) {
            if (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
                                 value, size, keys > 0 ? key : NULL, keylen,
                                 NULL) == 0)
                break;
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "baseline-producer: produce: %s\n",
                        rd_kafka_err2str(rd_kafka_last_error()));
                return 2;
            }
            rd_kafka_poll(rk, 10);
        }
        rd_kafka_poll(rk, 0);
    }
    while (delivered + failed < count)
        rd_kafka_flush(rk, 1000);
    elapsed = now_s() - start;

    printf("RESULT msgs=%ld errors=%ld seconds=%.3f msgs_per_s=%.0f\n",
           delivered, failed, elapsed, delivered / elapsed);
    if (failed)
        fprintf(stderr, "baseline-producer: %ld failed, first: %s\n", failed,
                first_error);
    free(value);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return failed ? 1 : 0;
}
