/*
 * latency-consumer: reads a topic from its current end and, for each
 * message, computes now minus the Unix timestamp in microseconds that the
 * sender put in the payload: the time from outbox_send() to the consumer.
 *
 * The value is either the payload itself (outbox.message_format =
 * 'payload') or pg_outbox's protobuf envelope (proto/outbox.proto), whose
 * field 4 holds the payload; both are understood. The payload is the
 * timestamp as decimal text, e.g. from
 *   (extract(epoch from clock_timestamp()) * 1e6)::bigint::text
 *
 * Build:
 *   cc -O2 -Wall -Wextra -Werror -o latency-consumer latency_consumer.c -lrdkafka -lm
 *
 * Usage:
 *   latency-consumer -b BROKERS -t TOPIC [-n COUNT] [-T TIMEOUT_S]
 *                    [-i IDLE_S] [-w WINDOW_S] [-f FETCH_WAIT_MS]
 *                    [-d FILE] [-X name=value]...
 *
 *   -n COUNT          stop after COUNT messages (default: no limit)
 *   -T TIMEOUT_S      stop after this many seconds in all (default 60)
 *   -i IDLE_S         stop when no message came for IDLE_S seconds after
 *                     the first one (default: never)
 *   -w WINDOW_S       also report per window of WINDOW_S seconds, counted
 *                     from READY (default: no windows)
 *   -f FETCH_WAIT_MS  fetch.wait.max.ms (default 1). librdkafka's mock
 *                     broker answers an empty fetch only after this wait,
 *                     so it bounds what the consumer adds to a latency.
 *   -d FILE           at the end, write every sample to FILE, one line
 *                     each: receive time (Unix seconds) and latency (ms),
 *                     so that several runs can be summarised together; on
 *                     a topic with message.timestamp.type=LogAppendTime a
 *                     third column: the ms from the payload's clock to the
 *                     leader's append (the broker's clock, in whole ms:
 *                     taken as the middle of its millisecond), which
 *                     splits the latency at the broker
 *
 * Output (stdout):
 *   READY partitions=P           once every partition is assigned at its end
 *   WINDOW i start_s end_s count rate_per_s p50_ms p99_ms max_ms   (with -w)
 *   RESULT count=N bad=B seconds=S p50_ms=.. p99_ms=.. max_ms=.. min_ms=..
 * "bad" counts messages whose payload is not a timestamp.
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

typedef struct Sample {
    double at_s;   /* receive time, seconds since READY */
    double lat_ms; /* latency */
    int64_t at_us; /* receive time, Unix microseconds */
    double append_ms; /* from the payload's clock to the leader's append
                       * (LogAppendTime), NAN if the topic keeps CreateTime */
} Sample;

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t real_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char errstr[512];

    if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
        fprintf(stderr, "latency-consumer: %s=%s: %s\n", name, value, errstr);
        exit(2);
    }
}

static int parse_decimal(const unsigned char *p, size_t len, int64_t *out)
{
    int64_t v = 0;

    if (len == 0 || len > 19)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

static int read_varint(const unsigned char **p, const unsigned char *end,
                       uint64_t *out)
{
    uint64_t v = 0;

    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;

        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* The timestamp in a raw payload, or in field 4 of the envelope. */
static int extract_timestamp(const void *value, size_t len, int64_t *ts)
{
    const unsigned char *p = value;
    const unsigned char *end = p + len;

    if (parse_decimal(p, len, ts))
        return 1;
    while (p < end) {
        uint64_t tag, n;

        if (!read_varint(&p, end, &tag))
            return 0;
        switch (tag & 7) {
        case 0:
            if (!read_varint(&p, end, &n))
                return 0;
            break;
        case 1:
            if (end - p < 8)
                return 0;
            p += 8;
            break;
        case 2:
            if (!read_varint(&p, end, &n) || n > (uint64_t)(end - p))
                return 0;
            if ((tag >> 3) == 4)
                return parse_decimal(p, n, ts);
            p += n;
            break;
        case 5:
            if (end - p < 4)
                return 0;
            p += 4;
            break;
        default:
            return 0;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double pct(const double *v, size_t n, double p)
{
    size_t rank;

    if (n == 0)
        return NAN;
    rank = (size_t)ceil(p * n);
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

static void usage(void)
{
    fprintf(stderr,
            "usage: latency-consumer -b BROKERS -t TOPIC [-n COUNT] [-T TIMEOUT_S] "
            "[-i IDLE_S] [-w WINDOW_S] [-f FETCH_WAIT_MS] [-d FILE] [-X name=value]...\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *brokers = NULL, *topic = NULL;
    long count = 0;
    double timeout_s = 60, idle_s = 0, window_s = 0;
    const char *fetch_wait = "1";
    const char *dump = NULL;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_partition_list_t *assignment;
    char errstr[512], group[64];
    int partitions = 0;
    Sample *samples = NULL;
    size_t nsamples = 0, cap = 0;
    long bad = 0;
    double ready, last_msg = 0, elapsed, *lat;
    int opt;

    while ((opt = getopt(argc, argv, "b:t:n:T:i:w:f:d:X:")) != -1) {
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
        case 'T':
            timeout_s = strtod(optarg, NULL);
            break;
        case 'i':
            idle_s = strtod(optarg, NULL);
            break;
        case 'w':
            window_s = strtod(optarg, NULL);
            break;
        case 'f':
            fetch_wait = optarg;
            break;
        case 'd':
            dump = optarg;
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
    if (!brokers || !topic)
        usage();

    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    snprintf(group, sizeof(group), "latency-consumer-%d", (int)getpid());
    set(conf, "bootstrap.servers", brokers);
    set(conf, "group.id", group);
    set(conf, "enable.auto.commit", "false");
    set(conf, "enable.auto.offset.store", "false");
    set(conf, "fetch.wait.max.ms", fetch_wait);
    set(conf, "fetch.error.backoff.ms", "1");
    set(conf, "socket.nagle.disable", "true");
    rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "latency-consumer: %s\n", errstr);
        return 2;
    }
    rd_kafka_poll_set_consumer(rk);

    rkt = rd_kafka_topic_new(rk, topic, NULL);
    for (int i = 0; i < 100 && partitions == 0; i++) {
        if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
                partitions = md->topics[0].partition_cnt;
            rd_kafka_metadata_destroy(md);
        }
        if (partitions == 0)
            usleep(100 * 1000);
    }
    rd_kafka_topic_destroy(rkt);
    if (partitions == 0) {
        fprintf(stderr, "latency-consumer: no metadata for %s\n", topic);
        return 2;
    }

    /* start at each partition's current end, known before READY */
    assignment = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; p++) {
        int64_t low, high;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(rk, topic, p, &low, &high, 10000);

        if (err) {
            fprintf(stderr, "latency-consumer: watermarks of %s [%d]: %s\n", topic,
                    p, rd_kafka_err2str(err));
            return 2;
        }
        rd_kafka_topic_partition_list_add(assignment, topic, p)->offset = high;
    }
    if (rd_kafka_assign(rk, assignment)) {
        fprintf(stderr, "latency-consumer: assign failed\n");
        return 2;
    }
    rd_kafka_topic_partition_list_destroy(assignment);

    printf("READY partitions=%d\n", partitions);
    fflush(stdout);
    ready = mono_s();

    while (!stop_requested) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 50);
        double now = mono_s();

        if (m) {
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    fprintf(stderr, "latency-consumer: %s\n", rd_kafka_message_errstr(m));
            } else {
                int64_t ts;
                int64_t at = real_us();
                rd_kafka_timestamp_type_t tstype;
                int64_t appended = rd_kafka_message_timestamp(m, &tstype);

                if (extract_timestamp(m->payload, m->len, &ts)) {
                    if (nsamples == cap) {
                        cap = cap ? cap * 2 : 65536;
                        samples = realloc(samples, cap * sizeof(Sample));
                        if (!samples) {
                            fprintf(stderr, "latency-consumer: out of memory\n");
                            return 2;
                        }
                    }
                    samples[nsamples].at_s = now - ready;
                    samples[nsamples].lat_ms = (at - ts) / 1000.0;
                    samples[nsamples].at_us = at;
                    /* the broker keeps milliseconds: the middle of one */
                    samples[nsamples].append_ms =
                        tstype == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME && appended >= 0
                            ? (appended * 1000 + 500 - ts) / 1000.0
                            : NAN;
                    nsamples++;
                } else
                    bad++;
                last_msg = now;
            }
            rd_kafka_message_destroy(m);
        }
        if (count > 0 && (long)nsamples + bad >= count)
            break;
        if (now - ready >= timeout_s)
            break;
        if (idle_s > 0 && last_msg > 0 && now - last_msg >= idle_s)
            break;
    }
    elapsed = mono_s() - ready;

    if (dump) {
        FILE *f = fopen(dump, "w");

        if (!f) {
            fprintf(stderr, "latency-consumer: %s: cannot write\n", dump);
            return 2;
        }
        for (size_t i = 0; i < nsamples; i++) {
            fprintf(f, "%.6f %.3f", samples[i].at_us / 1e6, samples[i].lat_ms);
            if (!isnan(samples[i].append_ms))
                fprintf(f, " %.3f", samples[i].append_ms);
            fputc('\n', f);
        }
        if (fclose(f) != 0) {
            fprintf(stderr, "latency-consumer: %s: write failed\n", dump);
            return 2;
        }
    }
    lat = malloc((nsamples ? nsamples : 1) * sizeof(double));
    if (window_s > 0 && nsamples > 0) {
        int nwindows = (int)(samples[nsamples - 1].at_s / window_s) + 1;

        for (int w = 0; w < nwindows; w++) {
            double start = w * window_s, end = start + window_s;
            size_t n = 0;
            double span;

            for (size_t i = 0; i < nsamples; i++)
                if (samples[i].at_s >= start && samples[i].at_s < end)
                    lat[n++] = samples[i].lat_ms;
            qsort(lat, n, sizeof(double), cmp_double);
            span = (end > elapsed ? elapsed : end) - start;
            printf("WINDOW %d %.1f %.1f %zu %.1f %.3f %.3f %.3f\n", w, start,
                   start + span, n, span > 0 ? n / span : 0.0, pct(lat, n, 0.5),
                   pct(lat, n, 0.99), n ? lat[n - 1] : NAN);
        }
    }
    for (size_t i = 0; i < nsamples; i++)
        lat[i] = samples[i].lat_ms;
    qsort(lat, nsamples, sizeof(double), cmp_double);
    printf("RESULT count=%zu bad=%ld seconds=%.3f p50_ms=%.3f p99_ms=%.3f "
           "max_ms=%.3f min_ms=%.3f\n",
           nsamples, bad, elapsed, pct(lat, nsamples, 0.5), pct(lat, nsamples, 0.99),
           nsamples ? lat[nsamples - 1] : NAN, nsamples ? lat[0] : NAN);
    fflush(stdout);

    free(lat);
    free(samples);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
}
