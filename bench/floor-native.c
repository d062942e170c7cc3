// The floor under a native sidecar: floor.mjs's `sidecar` mode without a
// JavaScript runtime. Same kernel files (held open, pread into one buffer;
// the first number of each, nothing validated), the same script on the same
// raw socket (SCRIPT LOAD once, then one EVALSHA a sample; the reply read to
// its end, blocking), and a JSON line with drill's sample keys. No alarms,
// nulls, rates or trend. Run by watch-vs-shell.mjs, which compiles it with cc
// and reads its CPU the way it reads drill's: what a sampler that does not
// wake a JavaScript runtime per sample would start from on this machine.
// usage: floor-native <redis port> <interval ms> <count> <nfiles> <file>... <key>...
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char LUA[] =
    "return {redis.call('LLEN', KEYS[1]), redis.call('LINDEX', KEYS[1], 0), "
    "redis.call('LRANGE', KEYS[2], 0, -1), redis.call('HGETALL', KEYS[3])}";

static char reply[1 << 20];
static size_t reply_len;

static void die(const char *what) {
  fprintf(stderr, "floor-native: %s: %s\n", what, errno ? strerror(errno) : "unexpected reply");
  exit(1);
}

/* End of the RESP2 value at `at`, or 0 while it is incomplete. */
static size_t resp_end(size_t at) {
  char *line_end = memmem(reply + at, reply_len - at, "\r\n", 2);
  if (at >= reply_len || line_end == NULL) return 0;
  size_t next = (size_t)(line_end - reply) + 2;
  long n = strtol(reply + at + 1, NULL, 10);
  switch (reply[at]) {
    case ':': case '+': case '-': return next;
    case '$': return n < 0 ? next : next + (size_t)n + 2 <= reply_len ? next + (size_t)n + 2 : 0;
    case '*':
      for (long k = 0; k < n; k++) {
        next = resp_end(next);
        if (next == 0) return 0;
      }
      return next;
    default: errno = 0; die("not a RESP2 reply");
  }
  return 0;
}

/* Send a request and read its whole reply into `reply`. */
static void round_trip(int sock, const char *request, size_t length) {
  if (write(sock, request, length) != (ssize_t)length) die("write");
  reply_len = 0;
  for (;;) {
    ssize_t n = read(sock, reply + reply_len, sizeof reply - reply_len);
    if (n <= 0) die("read");
    reply_len += (size_t)n;
    if (resp_end(0) != 0) return;
  }
}

static size_t resp_command(char *out, size_t size, int argc, const char **argv) {
  size_t o = (size_t)snprintf(out, size, "*%d\r\n", argc);
  for (int i = 0; i < argc; i++) o += (size_t)snprintf(out + o, size - o, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
  return o;
}

static char text[64 * 1024];

// Held open and read from offset 0 each sample, as drill's sampler reads kernel files.
static long long first_number(const char *file, int *held) {
  if (*held < 0 && (*held = open(file, O_RDONLY | O_CLOEXEC)) < 0) die(file);
  size_t length = 0;
  for (ssize_t n; (n = pread(*held, text + length, sizeof text - length, (off_t)length)) > 0;) length += (size_t)n;
  size_t i = 0;
  while (i < length && (text[i] < '0' || text[i] > '9')) i++;
  long long value = 0;
  for (; i < length && text[i] >= '0' && text[i] <= '9'; i++) value = value * 10 + (text[i] - '0');
  return value;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: floor-native <port> <interval ms> <count> <nfiles> <file>... <key>...\n"); return 2; }
  int port = atoi(argv[1]), count = atoi(argv[3]), nfiles = atoi(argv[4]);
  long interval_ms = atol(argv[2]);
  char **files = argv + 5, **keys = argv + 5 + nfiles;
  int nkeys = argc - 5 - nfiles;
  if (nfiles < 1 || nkeys < 1) { fprintf(stderr, "floor-native: need files and keys\n"); return 2; }

  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) die("connect");
  int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  static char request[4096];
  const char *load[] = {"SCRIPT", "LOAD", LUA};
  round_trip(sock, request, resp_command(request, sizeof request, 3, load));
  char sha[41] = {0};
  if (reply[0] != '$' || reply_len < 45) die("SCRIPT LOAD");
  memcpy(sha, strstr(reply, "\r\n") + 2, 40);
  const char *evalsha[] = {"EVALSHA", sha, "3", "jobs", "jobs:admitted", "jobs:stats"};
  size_t evalsha_len = resp_command(request, sizeof request, 6, evalsha);

  long long numbers[256];
  int held[256];
  for (int f = 0; f < 256; f++) held[f] = -1;
  if (nfiles > 256) nfiles = 256;
  static char line[16 * 1024];
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (int i = 0; i < count; i++) {
    if (write(sock, request, evalsha_len) != (ssize_t)evalsha_len) die("write");
    for (int f = 0; f < nfiles; f++) numbers[f] = first_number(files[f], &held[f]);
    reply_len = 0;
    do {
      ssize_t n = read(sock, reply + reply_len, sizeof reply - reply_len);
      if (n <= 0) die("read");
      reply_len += (size_t)n;
    } while (resp_end(0) == 0);
    // {LLEN, LINDEX 0, LRANGE admitted, HGETALL stats}
    size_t at = strstr(reply, "\r\n") - reply + 2;
    long long queue_len = strtoll(reply + at + 1, NULL, 10);
    at = resp_end(at);
    long long head = reply[at] == '$' ? strtoll(reply + at + 1, NULL, 10) : -1;
    at = resp_end(at);
    long long admitted = strtoll(reply + at + 1, NULL, 10);
    at = resp_end(at);
    admitted += strtoll(reply + at + 1, NULL, 10);

    size_t o = 0;
    line[o++] = '{';
    for (int k = 0; k < nkeys; k++) {
      // set below, as floor.mjs overwrites them
      if (!strcmp(keys[k], "ts") || !strcmp(keys[k], "queue_len") || !strcmp(keys[k], "queue_age_ms") || !strcmp(keys[k], "admitted")) continue;
      o += (size_t)snprintf(line + o, sizeof line - o, "\"%s\":%lld,", keys[k], numbers[k % nfiles]);
    }
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    struct tm tm;
    gmtime_r(&wall.tv_sec, &tm);
    o += strftime(line + o, sizeof line - o, "\"ts\":\"%Y-%m-%dT%H:%M:%S", &tm);
    o += (size_t)snprintf(line + o, sizeof line - o, ".%03ldZ\",\"queue_len\":%lld,", wall.tv_nsec / 1000000, queue_len);
    if (head < 0) o += (size_t)snprintf(line + o, sizeof line - o, "\"queue_age_ms\":null,");
    else o += (size_t)snprintf(line + o, sizeof line - o, "\"queue_age_ms\":%lld,", head);
    o += (size_t)snprintf(line + o, sizeof line - o, "\"admitted\":%lld}\n", admitted);
    if (write(1, line, o) != (ssize_t)o) die("write stdout");

    next.tv_nsec += interval_ms * 1000000L;
    next.tv_sec += next.tv_nsec / 1000000000L;
    next.tv_nsec %= 1000000000L;
    if (i + 1 < count) while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {}
  }
  close(sock);
  return 0;
}
