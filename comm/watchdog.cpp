#include "comm/watchdog.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "util/fault.hpp"
#include "util/log.hpp"
#include "util/stop_request.hpp"

namespace tessera::comm {

namespace {

constexpr int kHostLen = 64;
constexpr int kMaxAddr = 8;
constexpr double kConnectTimeout = 2.0;  // seconds per address a rank tries
constexpr double kAcceptTimeout = 20.0;  // seconds rank 0 waits for every rank to connect

/// Who a rank is, for the message that names it.
struct Peer {
  std::int32_t pid = 0;
  char host[kHostLen] = {};
};

/// Where rank 0 listens (broadcast): port 0 when it could not listen.
struct Rendezvous {
  std::uint64_t token = 0;
  std::uint32_t addr[kMaxAddr] = {};  // IPv4, network order; non-loopback first
  std::int32_t naddr = 0;
  std::uint16_t port = 0;
  char host[kHostLen] = {};
};

/// Every message is 16 bytes.
struct Msg {
  char type = 0;
  char pad[3] = {};
  std::int32_t rank = 0;
  std::int32_t a = 0;  // hello: token low; beat: iteration; abort: culprit
  std::int32_t b = 0;  // hello: token high; beat: point
};
static_assert(sizeof(Msg) == 16);

enum : char {
  kHello = 'O',  // first message of a rank to rank 0: rank and token
  kBeat = 'H',   // a heartbeat with the sender's iteration and point
  kBye = 'B',    // the sender finished: stop watching it
  kQuiet = 'Q',  // the job is ending with a message printed elsewhere: report nothing
  kAbort = 'A',  // (from rank 0) the job is ending because of rank `a`: exit quietly
};

enum class PeerState { watching, done, closed };

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text(int e) {
  return std::strerror(e);
}

void set_nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL, 0);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/// The IPv4 addresses of this host's interfaces that are up, non-loopback first.
int local_addresses(std::uint32_t* out) {
  int n = 0;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return 0;
  for (int pass = 0; pass < 2; ++pass)
    for (ifaddrs* i = ifs; i != nullptr && n < kMaxAddr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0) continue;
      const bool loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
      if (loop != (pass == 1)) continue;
      out[n++] = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    }
  ::freeifaddrs(ifs);
  return n;
}

/// A connected socket to addr:port within kConnectTimeout, else -1.
int connect_to(std::uint32_t addr, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = addr;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  const int r = ::poll(&p, 1, static_cast<int>(kConnectTimeout * 1000));
  int err = 0;
  socklen_t len = sizeof err;
  if (r != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/// Sends all of `m` (a few tries; a peer that reads nothing for long fills its buffer, and
/// then heartbeats are dropped, which is what a stopped peer deserves).
bool send_msg(int fd, const Msg& m) {
  const char* p = reinterpret_cast<const char*>(&m);
  std::size_t left = sizeof m;
  for (int tries = 0; left > 0 && tries < 100; ++tries) {
    const ssize_t w = ::send(fd, p, left, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      left -= static_cast<std::size_t>(w);
    } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return false;
    } else if (left == sizeof m) {
      return false;  // nothing sent: drop the message whole
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return left == 0;
}

/// Ends the process with status 1 from the watchdog's thread: stdout's buffered lines are
/// flushed unless the main thread is inside a print (then they are lost, rather than wait).
[[noreturn]] void exit_now() {
  if (::ftrylockfile(stdout) == 0) {
    std::fflush(stdout);
    ::funlockfile(stdout);
  }
  std::_Exit(1);
}

/// Writes one line to stderr in one call (no stdio lock: the main thread may hold it).
void print_line(const std::string& line) {
  const std::string s = line + "\n";
  ssize_t off = 0;
  while (off < static_cast<ssize_t>(s.size())) {
    const ssize_t w = ::write(2, s.data() + off, s.size() - static_cast<std::size_t>(off));
    if (w <= 0) break;
    off += w;
  }
}

/// The running watchdog's wake pipe (write end), for the progress hook; -1: none.
std::atomic<int> g_wake_fd{-1};
/// When the hook last woke the thread (steady clock, nanoseconds).
std::atomic<long long> g_last_wake_ns{0};

/// util::fault's progress hook: a new iteration began. Wakes the watchdog's thread, at most
/// every 100 ms, so that it sends a heartbeat naming the iteration at once (one atomic load
/// and a clock read per iteration otherwise).
void on_progress() {
  const int fd = g_wake_fd.load(std::memory_order_relaxed);
  if (fd < 0) return;
  const long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
  long long last = g_last_wake_ns.load(std::memory_order_relaxed);
  if (now - last < 100'000'000LL) return;
  if (!g_last_wake_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  const char b = 2;
  (void)!::write(fd, &b, 1);  // non-blocking: a full pipe already wakes the thread
}

}  // namespace

struct Watchdog::State {
  int rank = 0;
  int size = 1;
  double timeout = 0;
  double beat = 1;
  std::uint64_t token = 0;
  std::vector<Peer> peers;
  // The connections: rank 0 holds one to every other rank (fd[r]); another rank one to rank
  // 0 (fd[0]). -1 where there is none.
  std::vector<int> fd;
  std::vector<std::string> inbuf;
  std::vector<double> last_seen;
  std::vector<int> seen_iter, seen_point;
  std::vector<PeerState> state;
  std::mutex send_mutex;
  std::atomic<bool> stop{false};
  std::atomic<bool> quiet{false};
  int wake[2] = {-1, -1};  // a byte written to wake[1] ends the thread's poll at once
  std::thread thread;

  bool same_host(int r) const {
    return std::strncmp(peers[r].host, peers[rank].host, kHostLen) == 0;
  }

  std::string who(int r) const {
    return "rank " + std::to_string(r) + " (host " + peers[r].host + ", pid " +
           std::to_string(peers[r].pid) + ")";
  }

  /// What rank r's last heartbeat said, `age` seconds ago.
  std::string where(int r, double age) const {
    const int it = seen_iter[r];
    const auto p = static_cast<util::fault::Point>(seen_point[r]);
    char when[48];
    std::snprintf(when, sizeof when, "%.1f s earlier", age);
    std::string w = std::string("its last heartbeat (") + when + ") came ";
    if (it <= 0) return w + "before its first iteration";
    w += "in iteration " + std::to_string(it);
    if (p != util::fault::Point::none && p != util::fault::Point::prepare)
      w += std::string(", at its ") + util::fault::name(p);
    return w;
  }

  void send_to_all(const Msg& m, int except = -1) {
    std::lock_guard<std::mutex> lock(send_mutex);
    for (int r = 0; r < size; ++r)
      if (r != except && fd[r] >= 0) send_msg(fd[r], m);  // a closed peer: EPIPE, ignored
  }

  /// Ends this process after rank `r` failed (`dead`: its connection closed without a
  /// goodbye; else it was silent for `timeout` seconds).
  [[noreturn]] void end_job(int r, bool dead, double silent_s) {
    const double age = now_s() - last_seen[r];
    const bool printer = rank == 0 || (r == 0 && rank == 1);
    if (printer) {
      std::string line = "tessera: error: " + who(r);
      if (dead)
        line +=
            " ended without finishing (killed, or crashed: its watchdog connection closed "
            "without a goodbye); " +
            where(r, age) + "; ending the job";
      else
        line += " stopped answering: no heartbeat for " +
                std::to_string(static_cast<int>(std::lround(silent_s))) +
                " s (the process is stopped or its node hangs); " + where(r, age) +
                "; ending the job (--watchdog sets the limit)";
      print_line(line);
    }
    if (rank == 0) {
      Msg m;
      m.type = kAbort;
      m.rank = rank;
      m.a = r;
      send_to_all(m, r);
    }
    // A stopped rank of this host would wait for ever (a launcher that ends the job kills it
    // too; one that does not would leave it): end it.
    if (!dead && same_host(r) && peers[r].pid > 0) ::kill(peers[r].pid, SIGKILL);
    // When rank 0 failed, every other rank saw it: rank 1 prints; the others give it a second
    // before their exit makes the launcher end the job.
    if (!printer) std::this_thread::sleep_for(std::chrono::seconds(1));
    exit_now();
  }

  void on_message(int from, const Msg& m, double now) {
    switch (m.type) {
      case kBeat:
        last_seen[from] = now;
        seen_iter[from] = m.a;
        seen_point[from] = m.b;
        break;
      case kBye:
        state[from] = PeerState::done;
        break;
      case kQuiet:
        quiet = true;
        if (rank == 0) {
          Msg q;
          q.type = kQuiet;
          send_to_all(q, from);
        }
        break;
      case kAbort:
        exit_now();  // rank 0 printed the job's message: end without another
      default:
        break;
    }
  }

  /// Handles the whole messages received from rank r so far.
  void drain(int r, double now) {
    std::string& in = inbuf[static_cast<std::size_t>(r)];
    std::size_t used = 0;
    for (; in.size() - used >= sizeof(Msg); used += sizeof(Msg)) {
      Msg m;
      std::memcpy(&m, in.data() + used, sizeof m);
      on_message(r, m, now);
    }
    in.erase(0, used);
  }

  void loop() {
    double last_tick = now_s(), next_beat = 0;
    std::vector<pollfd> pfd;
    std::vector<int> pr;
    char buf[512];
    while (!stop.load()) {
      pfd.clear();
      pr.clear();
      if (wake[0] >= 0) {
        pfd.push_back({wake[0], POLLIN, 0});
        pr.push_back(-1);
      }
      for (int r = 0; r < size; ++r)
        if (fd[r] >= 0 && state[r] != PeerState::closed) {
          pfd.push_back({fd[r], POLLIN, 0});
          pr.push_back(r);
        }
      ::poll(pfd.data(), pfd.size(), 200);
      const double now = now_s();
      if (now - last_tick > std::max(3.0, 3 * beat)) {
        // This thread was not scheduled for a while: the whole job was stopped and continued
        // (Slurm's suspend, Ctrl-Z), or this node was: the peers' silence is ours.
        for (double& t : last_seen) t = now;
      }
      last_tick = now;
      if (stop.load()) break;
      if (!pfd.empty() && pr[0] < 0 && (pfd[0].revents & POLLIN) != 0) {
        char drain[64];
        while (::read(wake[0], drain, sizeof drain) > 0) {
        }
        next_beat = 0;  // a new iteration: say so now
      }
      for (std::size_t k = 0; k < pfd.size(); ++k) {
        const int r = pr[k];
        if (r < 0 || (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        for (;;) {
          const ssize_t got = ::recv(fd[r], buf, sizeof buf, MSG_DONTWAIT);
          if (got > 0) {
            inbuf[r].append(buf, static_cast<std::size_t>(got));
            continue;
          }
          if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            // Closed. After a goodbye, or while the job ends anyway, that is expected.
            const PeerState was = state[r];
            state[r] = PeerState::closed;
            drain(r, now);  // what it said last
            const bool bye = was == PeerState::done || state[r] == PeerState::done;
            if (!bye && !quiet.load() && !stop.load() && util::stop_signal_seen() == 0)
              end_job(r, true, 0);
          }
          break;
        }
        drain(r, now);
      }
      if (now >= next_beat) {
        Msg m;
        m.type = kBeat;
        m.rank = rank;
        m.a = util::fault::iteration();
        m.b = static_cast<int>(util::fault::current());
        send_to_all(m);
        next_beat = now + beat;
      }
      if (quiet.load() || stop.load()) continue;
      for (int r = 0; r < size; ++r)
        if (fd[r] >= 0 && state[r] == PeerState::watching && now - last_seen[r] > timeout)
          end_job(r, false, now - last_seen[r]);
    }
  }
};

Watchdog::Watchdog(MPI_Comm comm, double timeout_s) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size < 2 || !(timeout_s > 0)) return;  // the same decision on every rank
  auto s = std::make_unique<State>();
  s->rank = rank;
  s->size = size;
  s->timeout = timeout_s;
  s->beat = std::min(1.0, timeout_s / 4);
  s->fd.assign(static_cast<std::size_t>(size), -1);
  s->inbuf.resize(static_cast<std::size_t>(size));
  s->last_seen.assign(static_cast<std::size_t>(size), now_s());
  s->seen_iter.assign(static_cast<std::size_t>(size), 0);
  s->seen_point.assign(static_cast<std::size_t>(size), 0);
  s->state.assign(static_cast<std::size_t>(size), PeerState::watching);

  Peer me;
  me.pid = static_cast<std::int32_t>(::getpid());
  std::snprintf(me.host, kHostLen, "%s", log::hostname().c_str());
  s->peers.resize(static_cast<std::size_t>(size));
  MPI_Allgather(&me, sizeof me, MPI_BYTE, s->peers.data(), sizeof me, MPI_BYTE, comm);

  std::string why;  // this rank's reason when it could not join
  Rendezvous rv;
  int lfd = -1;
  if (rank == 0) {
    lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof sa;
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        ::listen(lfd, std::min(size, 4096)) != 0 ||
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      why = "rank 0 cannot listen on a TCP port: " + errno_text(errno);
      if (lfd >= 0) ::close(lfd);
      lfd = -1;
    } else {
      rv.port = ntohs(sa.sin_port);
      rv.naddr = local_addresses(rv.addr);
      try {
        std::random_device rd;
        rv.token = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
      } catch (const std::exception&) {  // no entropy source: the clock and the pid
        rv.token = static_cast<std::uint64_t>(
                       std::chrono::steady_clock::now().time_since_epoch().count()) ^
                   (static_cast<std::uint64_t>(::getpid()) << 40);
      }
      std::snprintf(rv.host, kHostLen, "%s", me.host);
    }
  }
  MPI_Bcast(&rv, sizeof rv, MPI_BYTE, 0, comm);
  s->token = rv.token;

  if (rank != 0 && rv.port != 0) {
    // Rank 0 on this host: the loopback first; else rank 0's interfaces in its order.
    std::vector<std::uint32_t> tries;
    if (std::strncmp(rv.host, me.host, kHostLen) == 0) tries.push_back(htonl(INADDR_LOOPBACK));
    for (int k = 0; k < rv.naddr && k < kMaxAddr; ++k) tries.push_back(rv.addr[k]);
    for (std::uint32_t a : tries) {
      const int f = connect_to(a, rv.port);
      if (f < 0) continue;
      Msg hello;
      hello.type = kHello;
      hello.rank = rank;
      hello.a = static_cast<std::int32_t>(rv.token & 0xffffffffu);
      hello.b = static_cast<std::int32_t>(rv.token >> 32);
      if (send_msg(f, hello)) {
        s->fd[0] = f;
        break;
      }
      ::close(f);
    }
    if (s->fd[0] < 0) why = "cannot connect to rank 0 on " + std::string(rv.host);
  } else if (rank == 0 && lfd >= 0) {
    set_nonblocking(lfd);
    int joined = 0;
    std::vector<int> pending;
    std::vector<std::string> pbuf;
    const double end = now_s() + kAcceptTimeout;
    while (joined < size - 1 && now_s() < end) {
      std::vector<pollfd> p{{lfd, POLLIN, 0}};
      for (int f : pending) p.push_back({f, POLLIN, 0});
      ::poll(p.data(), p.size(), 100);
      if (p[0].revents & POLLIN)
        for (;;) {
          const int f = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (f < 0) break;
          pending.push_back(f);
          pbuf.emplace_back();
        }
      for (std::size_t k = 0; k < pending.size();) {
        char b[sizeof(Msg)];
        const std::size_t need = sizeof(Msg) - pbuf[k].size();
        const ssize_t got = ::recv(pending[k], b, need, MSG_DONTWAIT);
        if (got > 0) pbuf[k].append(b, static_cast<std::size_t>(got));
        bool drop = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        if (!drop && pbuf[k].size() == sizeof(Msg)) {
          Msg m;
          std::memcpy(&m, pbuf[k].data(), sizeof m);
          const std::uint64_t tok =
              static_cast<std::uint32_t>(m.a) |
              (static_cast<std::uint64_t>(static_cast<std::uint32_t>(m.b)) << 32);
          if (m.type == kHello && tok == rv.token && m.rank > 0 && m.rank < size &&
              s->fd[m.rank] < 0) {
            s->fd[m.rank] = pending[k];
            const int one = 1;
            ::setsockopt(pending[k], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            ++joined;
          } else {
            ::close(pending[k]);  // not one of ours
          }
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
          pbuf.erase(pbuf.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        if (drop) {
          ::close(pending[k]);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
          pbuf.erase(pbuf.begin() + static_cast<std::ptrdiff_t>(k));
          continue;
        }
        ++k;
      }
    }
    for (int f : pending) ::close(f);
    ::close(lfd);
    if (joined < size - 1) {
      int missing = -1;
      for (int r = 1; r < size && missing < 0; ++r)
        if (s->fd[r] < 0) missing = r;
      why = std::to_string(size - 1 - joined) + " rank(s) did not connect to rank 0 (" +
            std::string(rv.host) + ") within " + std::to_string(static_cast<int>(kAcceptTimeout)) +
            " s, rank " + std::to_string(missing) + " the first";
    }
  }
  int ok = why.empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  if (!ok) {
    for (int& f : s->fd)
      if (f >= 0) ::close(f);
    if (rank == 0)
      log::warn("the watchdog is off for this job: " +
                (why.empty() ? std::string("a rank could not connect to rank 0") : why) +
                " (TCP between the ranks; a rank that stops answering now ends the job only "
                "through --nccl-timeout; --watchdog 0 turns the watchdog off without this "
                "warning)");
    return;
  }
  const double t0 = now_s();
  for (double& t : s->last_seen) t = t0;
  if (::pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) s->wake[0] = s->wake[1] = -1;
  State* st = s.get();
  s->thread = std::thread([st] { st->loop(); });
  if (s->wake[1] >= 0) {
    g_wake_fd.store(s->wake[1]);
    util::fault::set_progress_hook(&on_progress);
  }
  s_ = std::move(s);
}

Watchdog::~Watchdog() {
  if (!s_) return;
  Msg bye;
  bye.type = kBye;
  bye.rank = s_->rank;
  util::fault::set_progress_hook(nullptr);
  g_wake_fd.store(-1);
  s_->stop = true;
  if (s_->wake[1] >= 0) {
    const char b = 1;
    (void)!::write(s_->wake[1], &b, 1);
  }
  if (s_->thread.joinable()) s_->thread.join();
  for (int f : s_->wake)
    if (f >= 0) ::close(f);
  s_->send_to_all(bye);
  for (int& f : s_->fd)
    if (f >= 0) ::close(f);
}

void Watchdog::failing() noexcept {
  if (!s_) return;
  s_->quiet = true;
  Msg q;
  q.type = kQuiet;
  q.rank = s_->rank;
  s_->send_to_all(q);
}

bool Watchdog::active() const noexcept {
  return s_ != nullptr && !s_->stop.load();
}

}  // namespace tessera::comm
