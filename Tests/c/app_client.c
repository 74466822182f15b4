/*
 * An app of its own against a live StoreKitSim queue, store and downloader, in C with libzmq,
 * written from docs/wire-format.md alone: register a device, launch, attach an observer, buy a
 * product with hosted content, wait for it to be purchased, download it, finish it, restore,
 * finish the restored copy, restore again without applicationUsername, and check that an
 * unknown product is rejected.
 *
 *   gcc -std=c11 -Wall -Wextra -Werror -o app_client app_client.c -lzmq
 *   app_client REQUESTS_ENDPOINT EVENTS_ENDPOINT DEVICE ACCOUNT
 *
 * Prints one line per step and exits 0 when every step held, 1 with a reason otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define FORMAT_VERSION 2
#define WIRE_VERSION 1
#define MAXIMUM_FRAMES 1100 /* a BATCH: 2 + at most 1,000 records */

static void fail(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    fprintf(stderr, "c-app: ");
    vfprintf(stderr, format, arguments);
    fprintf(stderr, "\n");
    va_end(arguments);
    exit(1);
}

static double now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* ---- Encoding (docs/wire-format.md, "Payload encoding") ---- */

typedef struct {
    uint8_t bytes[4096];
    size_t length;
} Buffer;

static void put_byte(Buffer *buffer, uint8_t value) {
    if (buffer->length >= sizeof buffer->bytes) fail("command too long");
    buffer->bytes[buffer->length++] = value;
}

static void put_varint(Buffer *buffer, uint64_t value) {
    while (value >= 0x80) {
        put_byte(buffer, (uint8_t)((value & 0x7F) | 0x80));
        value >>= 7;
    }
    put_byte(buffer, (uint8_t)value);
}

static void put_signed(Buffer *buffer, int64_t value) {
    put_varint(buffer, ((uint64_t)value << 1) ^ (uint64_t)(value >> 63));
}

static void put_string(Buffer *buffer, const char *text) {
    size_t length = strlen(text);
    put_varint(buffer, length);
    for (size_t index = 0; index < length; index++) put_byte(buffer, (uint8_t)text[index]);
}

static void put_u64(uint8_t *out, uint64_t value) {
    for (int index = 0; index < 8; index++) out[index] = (uint8_t)(value >> (8 * index));
}

static uint64_t get_u64(const uint8_t *in) {
    uint64_t value = 0;
    for (int index = 7; index >= 0; index--) value = (value << 8) | in[index];
    return value;
}

static uint32_t get_u32(const uint8_t *in) {
    return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

/* ---- Decoding, refusing anything the doc calls malformed ---- */

typedef struct {
    const uint8_t *bytes;
    size_t length, offset;
} Reader;

static uint8_t get_byte(Reader *reader) {
    if (reader->offset >= reader->length) fail("event payload ends early at byte %zu", reader->offset);
    return reader->bytes[reader->offset++];
}

static uint64_t get_varint(Reader *reader) {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        uint8_t byte = get_byte(reader);
        if (shift == 63 && byte > 1) fail("varint does not fit 64 bits");
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) return value;
    }
    fail("varint longer than 10 bytes");
    return 0;
}

static int64_t get_signed(Reader *reader) {
    uint64_t value = get_varint(reader);
    return (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
}

static bool get_bool(Reader *reader) {
    uint8_t byte = get_byte(reader);
    if (byte > 1) fail("bool byte %u", byte);
    return byte == 1;
}

/* Copies a string into `out` (truncated to `capacity` - 1 bytes), or skips it when `out` is NULL. */
static void get_string(Reader *reader, char *out, size_t capacity) {
    uint64_t length = get_varint(reader);
    if (length > reader->length - reader->offset) fail("string of %" PRIu64 " bytes beyond the payload", length);
    if (out) {
        size_t copied = length < capacity - 1 ? (size_t)length : capacity - 1;
        memcpy(out, reader->bytes + reader->offset, copied);
        out[copied] = 0;
    }
    reader->offset += (size_t)length;
}

static void get_double(Reader *reader) {
    for (int index = 0; index < 8; index++) get_byte(reader);
}

static void get_payment(Reader *reader) {
    get_string(reader, NULL, 0);        /* productIdentifier */
    get_signed(reader);                  /* quantity */
    if (get_bool(reader)) get_string(reader, NULL, 0); /* applicationUsername */
    if (get_bool(reader)) get_string(reader, NULL, 0); /* requestData (bytes: same layout) */
}

static void get_original(Reader *reader) {
    get_string(reader, NULL, 0);
    get_payment(reader);
    get_signed(reader);
}

static void get_contents(Reader *reader) {
    uint64_t count = get_varint(reader);
    if (count > 1000) fail("%" PRIu64 " hosted contents", count);
    for (uint64_t index = 0; index < count; index++) {
        get_string(reader, NULL, 0);
        get_signed(reader);
        get_string(reader, NULL, 0);
    }
}

static void get_error(Reader *reader) {
    get_byte(reader);
    get_string(reader, NULL, 0);
}

/* What this app needs of one event: its tag, the device or transaction key it names, and a few fields. */
typedef struct {
    uint64_t sequence;
    uint8_t tag;
    char device[129];
    uint64_t number;     /* transaction number (key), or restore number */
    uint64_t index;      /* download index */
    uint8_t code;        /* rejection code */
    bool has_key;
} Event;

static void get_key(Reader *reader, Event *event) {
    get_string(reader, event->device, sizeof event->device);
    event->number = get_varint(reader);
    event->has_key = true;
}

/* Decodes an event payload (docs/wire-format.md, "Event payload"); tags this app never meets are
 * reported with only their tag. */
static Event decode_event(uint64_t sequence, const uint8_t *bytes, size_t length) {
    Reader reader = {bytes, length, 0};
    Event event = {0};
    event.sequence = sequence;
    if (get_byte(&reader) != FORMAT_VERSION) fail("event %" PRIu64 ": payload version is not %d", sequence, FORMAT_VERSION);
    if (get_bool(&reader)) {
        get_string(&reader, NULL, 0);
        get_varint(&reader);
    }
    event.tag = get_byte(&reader);
    switch (event.tag) {
    case 1: /* runStarted */
        get_varint(&reader);
        get_string(&reader, NULL, 0);
        get_string(&reader, NULL, 0);
        get_signed(&reader);
        for (int field = 0; field < 4; field++) get_string(&reader, NULL, 0);
        break;
    case 2: /* deviceRegistered */
        get_string(&reader, event.device, sizeof event.device);
        get_string(&reader, NULL, 0);
        break;
    case 3: case 4: /* appLaunched, appTerminated */
        get_string(&reader, event.device, sizeof event.device);
        break;
    case 5: case 6: /* observerAttached, observerDetached */
        get_string(&reader, event.device, sizeof event.device);
        get_string(&reader, NULL, 0);
        break;
    case 8: /* transactionAdded */
        get_key(&reader, &event);
        get_payment(&reader);
        break;
    case 9: case 16: case 26: /* transactionDeferred, transactionFinished, askToBuyDeclined */
        get_key(&reader, &event);
        break;
    case 10: /* transactionPurchased */
        get_key(&reader, &event);
        get_string(&reader, NULL, 0);
        get_contents(&reader);
        get_bool(&reader);
        break;
    case 11: /* transactionFailed */
        get_key(&reader, &event);
        get_error(&reader);
        break;
    case 12: /* restoreStarted */
        get_string(&reader, event.device, sizeof event.device);
        event.number = get_varint(&reader);
        if (get_bool(&reader)) get_string(&reader, NULL, 0);
        break;
    case 13: /* transactionRestored */
        get_key(&reader, &event);
        get_varint(&reader);
        get_string(&reader, NULL, 0);
        get_original(&reader);
        get_contents(&reader);
        break;
    case 14: /* restoreFinished */
        get_string(&reader, event.device, sizeof event.device);
        event.number = get_varint(&reader);
        break;
    case 15: /* restoreFailed */
        get_string(&reader, event.device, sizeof event.device);
        event.number = get_varint(&reader);
        get_error(&reader);
        break;
    case 17: case 19: case 20: case 23: /* download started, paused, resumed, cancelled */
        get_key(&reader, &event);
        event.index = get_varint(&reader);
        break;
    case 18: /* downloadProgressed */
        get_key(&reader, &event);
        event.index = get_varint(&reader);
        get_double(&reader);
        get_double(&reader);
        break;
    case 21: /* downloadFinished */
        get_key(&reader, &event);
        event.index = get_varint(&reader);
        get_string(&reader, NULL, 0);
        break;
    case 22: /* downloadFailed */
        get_key(&reader, &event);
        event.index = get_varint(&reader);
        get_error(&reader);
        break;
    case 24: { /* commandRejected: this app only has addPayment (tag 7) rejected */
        uint8_t command = get_byte(&reader);
        if (command != 7) return event; /* another client's command: not decoded further */
        get_string(&reader, event.device, sizeof event.device);
        get_payment(&reader);
        event.code = get_byte(&reader);
        get_string(&reader, NULL, 0);
        break;
    }
    default:
        return event; /* not decoded: this app does not meet it */
    }
    if (reader.offset != reader.length) fail("event %" PRIu64 " (tag %u): %zu bytes after the last field", sequence, event.tag, reader.length - reader.offset);
    return event;
}

/* ---- ZeroMQ multipart helpers ---- */

typedef struct {
    zmq_msg_t parts[MAXIMUM_FRAMES];
    int count;
} Message;

static void message_close(Message *message) {
    for (int index = 0; index < message->count; index++) zmq_msg_close(&message->parts[index]);
    message->count = 0;
}

/* Receives one whole multipart message, waiting at most `milliseconds`; false on timeout. */
static bool receive(void *socket, Message *message, long milliseconds) {
    zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, milliseconds) <= 0) return false;
    message->count = 0;
    int more = 1;
    while (more) {
        if (message->count == MAXIMUM_FRAMES) fail("a message of more than %d frames", MAXIMUM_FRAMES);
        zmq_msg_t *part = &message->parts[message->count++];
        zmq_msg_init(part);
        if (zmq_msg_recv(part, socket, 0) < 0) fail("zmq_msg_recv: %s", zmq_strerror(zmq_errno()));
        more = zmq_msg_more(part);
    }
    return true;
}

static const uint8_t *part_data(Message *message, int index) { return zmq_msg_data(&message->parts[index]); }
static size_t part_size(Message *message, int index) { return zmq_msg_size(&message->parts[index]); }

static void send_frames(void *socket, int count, const void *const *data, const size_t *sizes) {
    for (int index = 0; index < count; index++) {
        if (zmq_send(socket, data[index], sizes[index], index + 1 < count ? ZMQ_SNDMORE : 0) < 0)
            fail("zmq_send: %s", zmq_strerror(zmq_errno()));
    }
}

/* ---- The app ---- */

static void *dealer, *subscriber;
static const char *origin;
static uint64_t next_number = 1;     /* command numbers start at 1, without gaps */
static uint64_t next_sequence = 1;   /* the next event sequence to deliver */
static Event events[4096];           /* every event of the partition delivered so far (this test's run is small) */
static int event_count;

/* FETCHes every published event from `next_sequence` on, in order (docs: FETCH). */
static void catch_up(void) {
    for (;;) {
        uint8_t body[12] = {0};
        put_u64(body, next_sequence); /* maximum_count 0: the server's maximum */
        const void *data[] = {"FETCH", body};
        size_t sizes[] = {5, sizeof body};
        send_frames(dealer, 2, data, sizes);
        Message reply;
        bool answered = false;
        double deadline = now_seconds() + 1.0;
        while (!answered && now_seconds() < deadline) {
            if (!receive(dealer, &reply, 200)) continue;
            answered = part_size(&reply, 0) == 5 && memcmp(part_data(&reply, 0), "BATCH", 5) == 0;
            if (!answered) message_close(&reply); /* a late ACK of an answered command */
        }
        if (!answered) continue; /* a FETCH may go unanswered: re-sent */
        if (reply.count < 2 || part_size(&reply, 1) != 20) fail("BATCH with a %zu-byte header", part_size(&reply, 1));
        const uint8_t *header = part_data(&reply, 1);
        uint64_t first = get_u64(header), published = get_u64(header + 12);
        uint32_t count = get_u32(header + 8);
        if (first != next_sequence || (int)count != reply.count - 2) fail("BATCH from %" PRIu64 " with %u records in %d frames", first, count, reply.count - 2);
        for (uint32_t index = 0; index < count; index++) {
            const uint8_t *record = part_data(&reply, 2 + (int)index);
            size_t size = part_size(&reply, 2 + (int)index);
            if (size < 24 || record[0] != WIRE_VERSION || record[1] != 1) fail("bad record frame in a BATCH");
            for (int reserved = 2; reserved < 8; reserved++) if (record[reserved]) fail("non-zero reserved header byte");
            uint64_t sequence = get_u64(record + 8);
            if (sequence != next_sequence) fail("record %" PRIu64 " where %" PRIu64 " was due", sequence, next_sequence);
            if (event_count == (int)(sizeof events / sizeof events[0])) fail("more events than this test expects");
            events[event_count++] = decode_event(sequence, record + 24, size - 24);
            next_sequence++;
        }
        message_close(&reply);
        if (next_sequence > published) return;
    }
}

/* Waits for a live event or heartbeat (the SUB is only a wake-up: FETCH fills any gap), then catches up. */
static void follow(long milliseconds) {
    Message message;
    if (receive(subscriber, &message, milliseconds)) {
        if (message.count != 3 || part_size(&message, 1) != 24) fail("a published message of %d frames", message.count);
        const uint8_t *header = part_data(&message, 1);
        if (header[0] != WIRE_VERSION || (header[1] != 1 && header[1] != 2)) fail("published header version %u kind %u", header[0], header[1]);
        message_close(&message);
        while (receive(subscriber, &message, 0)) message_close(&message);
    }
    catch_up();
}

/* The first event since `from` (an index into `events`) with `tag` for `device`, waiting up to 20 s. */
static Event wait_for(int from, uint8_t tag, const char *device) {
    double deadline = now_seconds() + 20;
    for (int index = from;; index++) {
        while (index >= event_count) {
            if (now_seconds() > deadline) fail("no event of tag %u for %s within 20 s", tag, device);
            follow(200);
        }
        if (events[index].tag == tag && strcmp(events[index].device, device) == 0) return events[index];
    }
}

/* Sends a command with the next id and waits for its ACK, re-sending with the same id every
 * second (docs: "Ids and retries"). Returns the status; `last_sequence` gets the ACK's. */
static uint8_t command(const Buffer *fields, uint8_t tag, uint64_t *last_sequence, char *message, size_t capacity) {
    Buffer payload = {.length = 0};
    uint64_t number = next_number++;
    put_byte(&payload, FORMAT_VERSION);
    put_byte(&payload, 1);
    put_string(&payload, origin);
    put_varint(&payload, number);
    put_byte(&payload, tag);
    memcpy(payload.bytes + payload.length, fields->bytes, fields->length);
    payload.length += fields->length;
    for (int attempt = 0; attempt < 15; attempt++) {
        const void *data[] = {"CMD", payload.bytes};
        size_t sizes[] = {3, payload.length};
        send_frames(dealer, 2, data, sizes);
        double deadline = now_seconds() + 1.0;
        while (now_seconds() < deadline) {
            Message reply;
            if (!receive(dealer, &reply, 100)) continue;
            bool ack = reply.count == 6 && part_size(&reply, 0) == 3 && memcmp(part_data(&reply, 0), "ACK", 3) == 0;
            bool ours = ack && part_size(&reply, 3) == 8 && get_u64(part_data(&reply, 3)) == number
                && part_size(&reply, 2) == strlen(origin) && memcmp(part_data(&reply, 2), origin, strlen(origin)) == 0;
            if (!ours) {
                message_close(&reply); /* a BATCH or an earlier command's late ACK */
                continue;
            }
            uint8_t status = part_data(&reply, 1)[0];
            *last_sequence = get_u64(part_data(&reply, 4));
            size_t length = part_size(&reply, 5) < capacity - 1 ? part_size(&reply, 5) : capacity - 1;
            memcpy(message, part_data(&reply, 5), length);
            message[length] = 0;
            message_close(&reply);
            if (status == 4) break; /* unavailable: retry with the same id */
            return status;
        }
    }
    fail("command %" PRIu64 " (tag %u) got no ACK within 15 attempts", number, tag);
    return 0;
}

/* A command that must be accepted. */
static uint64_t accepted(const Buffer *fields, uint8_t tag, const char *what) {
    uint64_t last = 0;
    char message[512];
    uint8_t status = command(fields, tag, &last, message, sizeof message);
    if (status != 0) fail("%s: status %u, %s", what, status, message);
    printf("%-26s accepted, last sequence %" PRIu64 "\n", what, last);
    return last;
}

static void put_key(Buffer *buffer, const char *device, uint64_t number) {
    put_string(buffer, device);
    put_varint(buffer, number);
}

/* finishTransaction (tag 8) of the device's transaction `number`. */
static void finish_transaction(const char *device, uint64_t number) {
    Buffer fields = {.length = 0};
    put_key(&fields, device, number);
    accepted(&fields, 8, "finishTransaction");
}

/* restoreCompletedTransactions (tag 9), with the applicationUsername `account` or (NULL) without one. */
static void restore(const char *device, const char *account, const char *what) {
    Buffer fields = {.length = 0};
    put_string(&fields, device);
    put_byte(&fields, account != NULL);
    if (account != NULL) put_string(&fields, account);
    accepted(&fields, 9, what);
}

static void put_payment(Buffer *buffer, const char *product, const char *account) {
    put_string(buffer, product);
    put_signed(buffer, 1);
    put_byte(buffer, 1);
    put_string(buffer, account);
    put_byte(buffer, 0); /* no requestData */
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: app_client REQUESTS_ENDPOINT EVENTS_ENDPOINT DEVICE ACCOUNT\n");
        return 2;
    }
    const char *device = argv[3], *account = argv[4];
    const char *product = "com.example.sksim.levelpack.forest";
    char origin_text[64];
    snprintf(origin_text, sizeof origin_text, "c-app.%ld", (long)time(NULL)); /* unique per incarnation */
    origin = origin_text;
    void *context = zmq_ctx_new();
    dealer = zmq_socket(context, ZMQ_DEALER);
    subscriber = zmq_socket(context, ZMQ_SUB);
    int linger = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(subscriber, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(subscriber, ZMQ_SUBSCRIBE, "evt.", 4);
    zmq_setsockopt(subscriber, ZMQ_SUBSCRIBE, "hb", 2);
    if (zmq_connect(dealer, argv[1]) != 0 || zmq_connect(subscriber, argv[2]) != 0) fail("cannot connect: %s", zmq_strerror(zmq_errno()));

    /* PING until the queue answers. */
    double deadline = now_seconds() + 15;
    for (bool answered = false; !answered;) {
        if (now_seconds() > deadline) fail("the queue did not answer PING within 15 s");
        const void *data[] = {"PING"};
        size_t sizes[] = {4};
        send_frames(dealer, 1, data, sizes);
        Message pong;
        if (receive(dealer, &pong, 300)) {
            answered = pong.count == 3 && part_size(&pong, 0) == 4 && memcmp(part_data(&pong, 0), "PONG", 4) == 0 && part_size(&pong, 2) == 8;
            message_close(&pong);
        }
    }
    catch_up();
    printf("caught up on %d events\n", event_count);
    if (event_count < 1 || events[0].tag != 1) fail("the first record is not runStarted");

    Buffer fields = {.length = 0};
    put_string(&fields, device);
    put_string(&fields, account);
    accepted(&fields, 1, "registerDevice");
    fields.length = 0;
    put_string(&fields, device);
    accepted(&fields, 2, "launchApp");
    fields.length = 0;
    put_string(&fields, device);
    put_string(&fields, "c-observer");
    accepted(&fields, 4, "attachObserver");

    int mark = event_count;
    fields.length = 0;
    put_string(&fields, device);
    put_payment(&fields, product, account);
    accepted(&fields, 7, "addPayment");
    Event purchased = wait_for(mark, 10, device);
    printf("purchased                  %s#%" PRIu64 " at sequence %" PRIu64 "\n", device, purchased.number, purchased.sequence);

    mark = event_count;
    fields.length = 0;
    put_varint(&fields, 1);
    put_key(&fields, device, purchased.number);
    put_varint(&fields, 0);
    accepted(&fields, 10, "startDownloads");
    Event downloaded = wait_for(mark, 21, device);
    printf("downloaded                 %s#%" PRIu64 "/%" PRIu64 " at sequence %" PRIu64 "\n", device, downloaded.number, downloaded.index, downloaded.sequence);

    finish_transaction(device, purchased.number);

    mark = event_count;
    restore(device, account, "restoreCompletedTransactions");
    Event restored = wait_for(mark, 13, device);
    printf("restored                   %s#%" PRIu64 " at sequence %" PRIu64 "\n", device, restored.number, restored.sequence);
    Event finished = wait_for(mark, 14, device);
    printf("restore finished           restore %" PRIu64 " at sequence %" PRIu64 "\n", finished.number, finished.sequence);
    finish_transaction(device, restored.number);

    /* Restored again without applicationUsername: the account the device was registered with. */
    mark = event_count;
    restore(device, NULL, "restore (no username)");
    Event again = wait_for(mark, 13, device);
    wait_for(mark, 14, device);
    finish_transaction(device, again.number);

    /* An unknown product: rejected (status 1) with unknownProduct, and the rejection is logged. */
    mark = event_count;
    fields.length = 0;
    put_string(&fields, device);
    put_payment(&fields, "no.such.product", account);
    uint64_t last = 0;
    char message[512];
    uint8_t status = command(&fields, 7, &last, message, sizeof message);
    if (status != 1) fail("an unknown product got status %u", status);
    Event rejection = wait_for(mark, 24, device);
    if (rejection.code != 1) fail("rejection code %u, not unknownProduct (1)", rejection.code);
    printf("unknown product            rejected: %s\n", message);

    /* Both transactions finished: every transactionFinished of this device. */
    int finishes = 0;
    for (int index = 0; index < event_count; index++) finishes += events[index].tag == 16 && strcmp(events[index].device, device) == 0;
    if (finishes != 3) fail("%d transactions finished, not 3", finishes);
    printf("ok: %d events, 3 transactions finished\n", event_count);
    zmq_close(dealer);
    zmq_close(subscriber);
    zmq_ctx_term(context);
    return 0;
}
