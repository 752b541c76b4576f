//===- Subprocess.cpp - Run a program without a shell ---------------------===//
#include "runtime/Subprocess.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace attnc {

namespace {

using Clock = std::chrono::steady_clock;

/// posix_spawn attributes and file actions, destroyed on every path.
struct SpawnSetup {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  SpawnSetup() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

} // namespace

std::string ProcessResult::describe() const {
  if (timedOut) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "timed out after %.1f s", seconds);
    return buf;
  }
  if (signal)
    return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit status " + std::to_string(exitCode);
}

std::string formatCommand(const std::vector<std::string> &argv) {
  std::string s;
  for (const std::string &a : argv) {
    if (!s.empty())
      s += ' ';
    bool plain =
        !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
                                          "QRSTUVWXYZ0123456789-_=+./,:@%") == std::string::npos;
    if (plain) {
      s += a;
      continue;
    }
    s += '\'';
    for (char c : a)
      s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

Expected<ProcessResult> runProcess(const std::vector<std::string> &argv, double timeoutSeconds,
                                   size_t maxOutputBytes) {
  if (argv.empty() || argv[0].empty())
    return makeError("no program to run");
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0)
    return makeError(std::string("cannot create a pipe: ") + std::strerror(errno));

  SpawnSetup setup;
  // Own process group: a timeout kills the compiler driver and the cc1plus,
  // as and ld it started, not just the driver.
  short flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  posix_spawnattr_setflags(&setup.attr, flags);
  posix_spawnattr_setpgroup(&setup.attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&setup.attr, &none);
  // The parent may ignore SIGPIPE (servers do); the child should not inherit that.
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&setup.attr, &defaults);
  posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, pipeFds[1], 1);
  posix_spawn_file_actions_adddup2(&setup.actions, pipeFds[1], 2);

  std::vector<char *> cargv;
  for (const std::string &a : argv)
    cargv.push_back(const_cast<char *>(a.c_str()));
  cargv.push_back(nullptr);

  auto start = Clock::now();
  pid_t pid = -1;
  int err = ::posix_spawnp(&pid, cargv[0], &setup.actions, &setup.attr, cargv.data(), environ);
  ::close(pipeFds[1]);
  if (err != 0) {
    ::close(pipeFds[0]);
    return makeError("cannot run '" + argv[0] + "': " + std::strerror(err));
  }

  // Past ~3 years a limit is no limit (and would overflow the clock).
  if (timeoutSeconds > 1e8)
    timeoutSeconds = 0;
  ProcessResult res;
  bool truncated = false;
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeoutSeconds));
  char buf[1 << 15];
  for (;;) {
    int waitMs = -1;
    if (timeoutSeconds > 0) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        res.timedOut = true;
        break;
      }
      waitMs = int(std::min<long long>(left, 1 << 30));
    }
    struct pollfd p = {pipeFds[0], POLLIN, 0};
    int n = ::poll(&p, 1, waitMs);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0)
      continue; // Deadline check at the top.
    ssize_t r = ::read(pipeFds[0], buf, sizeof(buf));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break; // EOF: the program and its children closed their output.
    size_t room = maxOutputBytes - std::min(maxOutputBytes, res.output.size());
    res.output.append(buf, std::min(room, size_t(r)));
    truncated |= size_t(r) > room;
  }
  ::close(pipeFds[0]);

  // A program may close its output and keep running: the deadline still
  // applies while we wait for it to exit.
  int status = 0;
  for (;;) {
    if (res.timedOut) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR))
      break;
    if (timeoutSeconds > 0 && Clock::now() >= deadline)
      res.timedOut = true;
    else
      ::usleep(2000);
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(status)) {
    res.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res.signal = WTERMSIG(status);
  }
  if (truncated)
    res.output += "\n[output truncated after " + std::to_string(maxOutputBytes) + " bytes]\n";
  return res;
}

} // namespace attnc
