// The short version of scripts/load-test.sh: `turbokv serve` on the reference
// model as a child process, `turbokv loadgen` (8 clients x 5 requests, every
// response checked) against it, /metrics back at rest afterwards, and a clean
// exit on SIGTERM.
#include <httplib.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_cli.h"
#include "shared_data.h"

extern char** environ;

namespace tkv {
namespace {

const std::string kModel = std::string(TKV_SHARED_DIR) + "/models/ref-5m/ref-5m-f32.gguf";

// A metric's value from Prometheus text ("name value" lines); -1 if absent.
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

class LoadgenTest : public Cli {
 protected:
  void TearDown() override {
    if (pid_ > 0) {  // a failed test: do not leave the server running
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    Cli::TearDown();
  }

  // Starts `turbokv serve` on a free port of 18100..18199 (a port in use makes
  // the server exit with "cannot listen", and the next one is tried) and
  // returns once it has bound its port and answers /health.
  void start_server(const std::vector<std::string>& flags) {
    std::mt19937 rng(std::random_device{}());
    const int first = 18100 + static_cast<int>(rng() % 100);
    for (int k = 0; k < 100; ++k) {
      port_ = 18100 + (first - 18100 + k) % 100;
      std::vector<std::string> args = {TKV_BINARY, "serve", "-m", kModel, "--port", std::to_string(port_)};
      args.insert(args.end(), flags.begin(), flags.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, path("server.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      ASSERT_EQ(posix_spawn(&pid_, TKV_BINARY, &fa, nullptr, argv.data(), environ), 0);
      posix_spawn_file_actions_destroy(&fa);
      // Polls (no time limit of its own: ctest's timeout ends a server that never starts).
      for (;;) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          const std::string log = slurp(path("server.log"));
          ASSERT_NE(log.find("cannot listen"), std::string::npos) << "turbokv serve failed:\n" << log;
          break;  // port in use: the next one
        }
        if (slurp(path("server.log")).find("\nlistening on") != std::string::npos) {
          httplib::Client cli("127.0.0.1", port_);
          if (auto r = cli.Get("/health"); r && r->status == 200) return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    FAIL() << "no free port in 18100..18199";
  }

  // SIGTERM; returns the exit status (waits for it).
  int stop_server() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_F(LoadgenTest, ServerStaysConsistentUnderLoad) {
  TKV_NEED_SHARED(kModel);
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "4", "-c", "512", "--kv-budget", "16MiB", "-t", "1"}));
  const std::string url = "http://127.0.0.1:" + std::to_string(port_);

  const CliResult r = run("loadgen --url " + url + " --clients 8 --requests 5 --max-tokens 8 --seed 7");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("requests: 40, errors: 0,"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("latency: p50"), std::string::npos) << r.out;

  // Every response has been read: the engine finished and released those
  // sequences before (under the lock /metrics takes), and without
  // --slot-save-path idle slots keep no blocks.
  httplib::Client cli("127.0.0.1", port_);
  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_EQ(metric(m->body, "turbokv_requests_running"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "turbokv_requests_queued"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "turbokv_kv_blocks_used"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "turbokv_requests_total"), 40) << m->body;
  EXPECT_GT(metric(m->body, "turbokv_tokens_generated_total"), 0) << m->body;

  const int status = stop_server();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << slurp(path("server.log"));
}

TEST_F(LoadgenTest, CountsErrorsAndRejectsBadFlags) {
  TKV_NEED_SHARED(kModel);
  // A server with an API key: loadgen without it gets 401 on every request.
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "2", "-c", "256", "--kv-budget", "8MiB", "-t", "1", "--api-key", "k"}));
  const std::string url = "http://127.0.0.1:" + std::to_string(port_);
  CliResult r = run("loadgen --url " + url + " --clients 2 --requests 2 --max-tokens 4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("requests: 4, errors: 4,"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("HTTP 401"), std::string::npos) << r.err;
  r = run("loadgen --url " + url + " --clients 2 --requests 2 --max-tokens 4 --api-key k --stream-fraction 1");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const int status = stop_server();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(path("server.log"));

  r = run("loadgen --url " + url + " --clients 0");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--clients"), std::string::npos) << r.err;
  r = run("loadgen --url " + url + " --stream-fraction 1.5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--stream-fraction"), std::string::npos) << r.err;
  r = run("loadgen --url ftp://x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("http://"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tkv
