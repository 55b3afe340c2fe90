// The output policy (src/base/io/output.hpp): an output that is an input (same inode through a
// hard link, a symbolic link or another spelling) or another output is refused; special
// files (FIFOs, character devices) are written directly and stay what they were; an
// unwritable folder is found up front; temporaries are removed on error and, when their
// process of this host is gone, by the next run; existing files are replaced only when
// Tessera wrote them, or with --force, and an input never. Runs alone and under mpiexec
// (the collective validate: one agreed error on every rank).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "io/checkpoint.hpp"
#include "io/h5store.hpp"
#include "io/model_io.hpp"
#include "io/output.hpp"
#include "io/tns.hpp"
#include "util/error.hpp"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

comm::MpiCommunicator& world() {
  static comm::MpiCommunicator w(MPI_COMM_WORLD);
  return w;
}

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf[0] ? std::string(buf) : std::string("localhost");
}

/// A pid no process has: a child that exited and was reaped.
pid_t dead_pid() {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  int st = 0;
  ::waitpid(p, &st, 0);
  return p;
}

class IoOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder for the run (rank 0 makes it), one subfolder per rank for local tests.
    std::string tmpl = (fs::temp_directory_path() / "tessera-io-output-XXXXXX").string();
    if (world().rank() == 0) {
      ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    }
    world().broadcast(tmpl.data(), tmpl.size(), 0);
    shared_ = tmpl;
    dir_ = fs::path(shared_) / ("r" + std::to_string(world().rank()));
    world().barrier();
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() {
    world().barrier();
    if (world().rank() == 0) fs::remove_all(shared_);
  }
  void SetUp() override {
    for (const auto& e : fs::directory_iterator(dir_)) fs::remove_all(e.path());
  }

  static std::string path(const std::string& name) { return (fs::path(dir_) / name).string(); }
  static std::string write_file(const std::string& name, const std::string& text) {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  /// Names in the test folder containing ".tmp-".
  static std::vector<std::string> temporaries() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const auto f = e.path().filename().string();
      if (f.find(".tmp-") != std::string::npos) out.push_back(f);
    }
    return out;
  }
  /// The message of the InputError check() throws ("" when it accepts).
  static std::string refusal(const OutputSet& s, bool force = false) {
    try {
      s.check(force);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  static SparseTensor<double> small_tensor() {
    SparseTensor<double> x({4, 3, 5});
    const index_t a[3] = {0, 1, 2}, b[3] = {3, 2, 4}, c[3] = {1, 0, 0};
    x.push_back(a, 1.5);
    x.push_back(b, -2.25);
    x.push_back(c, 3.0);
    return x;
  }
  static KruskalModel small_model() {
    KruskalModel m;
    m.dims = {4, 3};
    m.rank = 2;
    m.lambda = {1.0, 2.0};
    m.factors = {Matrix<double>(4, 2, 0.5), Matrix<double>(3, 2, 0.25)};
    return m;
  }

  comm::MpiCommunicator self_{MPI_COMM_SELF};
  static std::string shared_;
  static fs::path dir_;
};
std::string IoOutput::shared_;
fs::path IoOutput::dir_;

TEST_F(IoOutput, TemporaryNamesCarryHostAndPid) {
  const std::string base = path("m.h5");
  const std::string pid = std::to_string(::getpid());
  EXPECT_EQ(temp_path(base), base + ".tmp-" + host() + "_" + pid);
  EXPECT_EQ(temp_path(base, "ckpt"), base + ".tmp-" + host() + "_" + pid + "_ckpt");
  EXPECT_THROW(temp_path(base, "1x"), Error);  // a tag starts with a letter
}

TEST_F(IoOutput, AnOutputThatIsAnInputIsRefusedByInode) {
  const std::string in = write_file("in.tns", "1 1 1 1.0\n");
  const std::string hard = path("hard.tns"), soft = path("soft.tns");
  fs::create_hard_link(in, hard);
  fs::create_symlink(in, soft);
  const std::string dotted = (fs::path(dir_) / "." / "in.tns").string();
  for (const std::string& out : {in, hard, soft, dotted}) {
    for (const OutputKind kind : {OutputKind::model, OutputKind::text, OutputKind::record}) {
      OutputSet s;
      s.add_input("the input", in);
      s.add_output("--out", out, kind);
      for (const bool force : {false, true}) {
        const std::string msg = refusal(s, force);
        EXPECT_NE(msg.find("--out '" + out + "' is the same file as the input '" + in + "'"),
                  std::string::npos)
            << out << ": " << msg;
        EXPECT_NE(msg.find("never writes over an input"), std::string::npos) << msg;
      }
    }
  }
  EXPECT_EQ(slurp(in), "1 1 1 1.0\n");
  // A copy is another file: accepted with --force (it is not Tessera's text).
  const std::string copy = write_file("copy.tns", "1 1 1 1.0\n");
  OutputSet s;
  s.add_input("the input", in);
  s.add_output("--out", copy, OutputKind::text);
  EXPECT_EQ(refusal(s, true), "");
  // The input this output may continue (a checkpoint and --resume): accepted.
  OutputSet r;
  r.add_input("--resume", in);
  r.add_output("--checkpoint", soft, OutputKind::model, "--resume");
  EXPECT_EQ(refusal(r), "");
}

TEST_F(IoOutput, TwoOutputsThatAreOneFileAreRefused) {
  // Not yet existing: the same folder and name, spelled twice.
  OutputSet s;
  s.add_output("--out", path("a.h5"), OutputKind::model);
  s.add_output("--json", (fs::path(dir_) / "." / "a.h5").string(), OutputKind::record);
  EXPECT_NE(refusal(s).find("are the same file: give each output its own name"), std::string::npos)
      << refusal(s);
  // Existing, through a hard link.
  const std::string a = write_file("a.json", "{}");
  fs::create_hard_link(a, path("b.json"));
  OutputSet t;
  t.add_output("--json", a, OutputKind::record);
  t.add_output("--checkpoint", path("b.json"), OutputKind::model);
  EXPECT_NE(refusal(t, true).find("--checkpoint '" + path("b.json") + "' and --json '" + a + "'"),
            std::string::npos)
      << refusal(t, true);
  // Distinct names are fine.
  OutputSet u;
  u.add_output("--out", path("m.h5"), OutputKind::model);
  u.add_output("--json", path("m.json"), OutputKind::record);
  EXPECT_EQ(refusal(u), "");
}

TEST_F(IoOutput, AFifoIsWrittenDirectly) {
  const std::string f = path("pipe");
  ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(f); });
  {
    AtomicOutput out(f);
    EXPECT_TRUE(out.special());
    EXPECT_EQ(out.write_path(), f);
    std::ofstream(out.write_path(), std::ios::binary) << "{\"a\": 1}\n";
    out.commit();
  }
  reader.join();
  EXPECT_EQ(got, "{\"a\": 1}\n");
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_TRUE(temporaries().empty());
  // The policy: a record or text may go to a FIFO; an HDF5 file needs a seekable file.
  OutputSet ok, bad;
  ok.add_output("--json", f, OutputKind::record);
  EXPECT_EQ(refusal(ok), "");
  bad.add_output("--out", f, OutputKind::model);
  EXPECT_NE(refusal(bad, true).find("is a FIFO: HDF5 files need a regular (seekable) file"),
            std::string::npos)
      << refusal(bad, true);
  // HDF5 writers refuse it too (nothing is created or replaced).
  EXPECT_THROW(write_kruskal_h5(f, small_model(), {}), InputError);
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(IoOutput, WriteTnsToAFifoGivesTheSameBytesAsToAFile) {
  const SparseTensor<double> x = small_tensor();
  for (const std::string ext : {".tns", ".tns.gz"}) {
    const std::string file = path("x" + ext);
    write_tns(file, x, self_);
    const std::string f = path("pipe" + ext);
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
    std::string got;
    std::thread reader([&] { got = slurp(f); });
    write_tns(f, x, self_);
    reader.join();
    EXPECT_EQ(got, slurp(file)) << ext;
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << ext;
  }
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(IoOutput, ACharacterDeviceStaysOne) {
  // A null device node of our own (root only), so a failure cannot harm /dev/null.
  const std::string dev = path("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "cannot create a device node here (needs root): " << std::strerror(errno);
  {
    AtomicOutput out(dev);
    EXPECT_TRUE(out.special());
    std::ofstream(out.write_path()) << "record\n";
    out.commit();
  }
  write_tns(dev, small_tensor(), self_);
  struct stat st {};
  ASSERT_EQ(::stat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced by a regular file";
  // Named twice (run record and text) it is accepted: a device holds no data to lose.
  OutputSet s;
  s.add_output("--json", dev, OutputKind::record);
  s.add_output("--out", dev, OutputKind::text);
  EXPECT_EQ(refusal(s), "");
  OutputSet h;
  h.add_output("--out", dev, OutputKind::store);
  EXPECT_NE(refusal(h, true).find("is a character device: HDF5 files need"), std::string::npos);
  // A block device is never written.
  const std::string blk = path("blk");
  if (::mknod(blk.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0) {
    OutputSet b;
    b.add_output("--out", blk, OutputKind::text);
    EXPECT_NE(refusal(b, true).find("is a block device"), std::string::npos) << refusal(b, true);
    EXPECT_THROW(AtomicOutput{blk}, InputError);
  }
}

TEST_F(IoOutput, AnUnwritableFolderIsFoundUpFront) {
  OutputSet s;
  s.add_output("--json", path("nowhere/r.json"), OutputKind::record);
  EXPECT_NE(
      refusal(s, true).find("--json '" + path("nowhere/r.json") + "': cannot create it: folder '" +
                            path("nowhere") + "' does not exist"),
      std::string::npos)
      << refusal(s, true);
  const std::string file = write_file("plain", "x");
  OutputSet t;
  t.add_output("--out", path("plain/m.h5"), OutputKind::model);
  EXPECT_NE(refusal(t).find("--out '" + path("plain/m.h5") + "'"), std::string::npos);
  OutputSet u;
  u.add_output("--out", path(""), OutputKind::model);  // a folder
  EXPECT_NE(refusal(u).find("is a folder"), std::string::npos) << refusal(u);
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    OutputSet v;
    v.add_output("--out", path("ro/m.h5"), OutputKind::model);
    EXPECT_NE(refusal(v).find("cannot create a file in folder '" + path("ro") + "'"),
              std::string::npos)
        << refusal(v);
    fs::permissions(path("ro"), fs::perms::owner_all);
  }
  EXPECT_TRUE(temporaries().empty());  // the probes are gone
}

TEST_F(IoOutput, StaleTemporariesOfDeadProcessesAreRemovedOthersKept) {
  const std::string out = path("m.h5");
  const std::string h = host();
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(::getppid() > 1 ? ::getppid() : ::getpid());
  const std::vector<std::string> stale = {
      "m.h5.tmp-" + h + "_" + dead,
      "m.h5.tmp-" + h + "_" + dead + "_ckpt",
      "m.h5.tmp-" + h + "_" + dead + "_ckpt.tmp-" + h + "_" + dead,
  };
  const std::vector<std::string> kept = {
      "m.h5.tmp-" + h + "_" + live,                                   // a running process
      "m.h5.tmp-" + h + "_" + std::to_string(::getpid()) + "_probe",  // this one
      "m.h5.tmp-other-host-name_" + dead,                             // another host
      "m.h5.tmp-" + h + "_" + dead + "7x",                            // not the naming
      "m.h5.tmp-" + h + "_" + dead + "_7",                            // a tag starts with a letter
      "other.h5.tmp-" + h + "_" + dead,                               // another output
      "m.h5",                                                         // the output itself
  };
  for (const auto& n : stale) write_file(n, "partial");
  for (const auto& n : kept) write_file(n, "keep");
  const auto removed = remove_stale_temporaries(out);
  EXPECT_EQ(removed.size(), stale.size());
  for (const auto& n : stale) EXPECT_FALSE(fs::exists(path(n))) << n;
  for (const auto& n : kept) EXPECT_TRUE(fs::exists(path(n))) << n;
  // OutputSet::clean() does the same for every output of a run.
  write_file(stale[0], "partial");
  OutputSet s;
  s.add_output("--out", out, OutputKind::model);
  EXPECT_EQ(s.clean().size(), 1u);
  EXPECT_FALSE(fs::exists(path(stale[0])));
}

TEST_F(IoOutput, TheTemporaryIsRemovedOnErrorAndTheOldFileKept) {
  const std::string p = write_file("r.json", "old\n");
  try {
    AtomicOutput out(p);
    EXPECT_EQ(out.write_path(), temp_path(p));
    std::ofstream(out.write_path()) << "half";
    throw InputError("failed half way");
  } catch (const InputError&) {
  }
  EXPECT_EQ(slurp(p), "old\n");
  EXPECT_TRUE(temporaries().empty());
  {
    AtomicOutput out(p);
    std::ofstream(out.write_path()) << "new\n";
    out.commit();
  }
  EXPECT_EQ(slurp(p), "new\n");
  EXPECT_TRUE(temporaries().empty());
  // A checkpoint write failing before its rename: the previous checkpoint stays, no
  // temporary of either level (checkpoint, model writer) is left.
  const std::string ck = path("run.ckpt.h5");
  KruskalModel m = small_model();
  CheckpointInfo info;
  info.iteration = 1;
  info.fit_history = {0.5};
  info.input.dims = m.dims;
  write_cp_checkpoint(ck, m, info);
  CheckpointWriteHooks hooks;
  hooks.before_rename = [](const std::string&) { throw InputError("disk full (injected)"); };
  info.iteration = 2;
  info.fit_history = {0.5, 0.6};
  EXPECT_THROW(write_cp_checkpoint(ck, m, info, &hooks), InputError);
  CheckpointInfo back;
  read_cp_checkpoint(ck, &back);
  EXPECT_EQ(back.iteration, 1);
  EXPECT_TRUE(temporaries().empty()) << temporaries().front();
}

TEST_F(IoOutput, ASymbolicLinkToAFileIsKeptAndItsTargetReplaced) {
  fs::create_directories(path("real"));
  const std::string target = write_file("real/r.json", "old\n");
  const std::string link = path("link.json");
  fs::create_symlink(target, link);
  {
    AtomicOutput out(link);
    EXPECT_FALSE(out.special());
    std::ofstream(out.write_path()) << "new\n";
    out.commit();
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(slurp(target), "new\n");
}

TEST_F(IoOutput, ExistingFilesAreReplacedOnlyWhenTesseraWroteThemOrWithForce) {
  // Tessera's own files of each kind.
  const std::string model = path("model.h5"), text = path("x.tns"), gz = path("x.tns.gz"),
                    store = path("x.h5");
  write_kruskal_h5(model, small_model(), {});
  write_tns(text, small_tensor(), self_);
  write_tns(gz, small_tensor(), self_);
  write_h5(store, small_tensor(), self_);
  const std::string rec =
      write_file("r.json", "{\"command\": \"cp\", \"written_by\": \"tessera\"}");
  const std::string legacy = write_file("old.json", "{\"command\": \"bench mttkrp\"}");
  const std::string user = write_file("notes.json", "{\"mine\": 1}\n");
  const std::string user_text = write_file("data.tns", "1 1 1 2.0\n");
  struct Case {
    std::string path;
    OutputKind kind;
    bool tessera;
  };
  for (const Case& c : std::vector<Case>{{model, OutputKind::model, true},
                                         {text, OutputKind::text, true},
                                         {gz, OutputKind::text, true},
                                         {store, OutputKind::store, true},
                                         {rec, OutputKind::record, true},
                                         {legacy, OutputKind::record, true},
                                         {user, OutputKind::record, false},
                                         {user_text, OutputKind::text, false},
                                         // Tessera's, but of another kind: a store is not a model
                                         {store, OutputKind::model, false},
                                         {model, OutputKind::store, false},
                                         {text, OutputKind::record, false}}) {
    EXPECT_EQ(written_by_tessera(c.path, c.kind), c.tessera) << c.path;
    OutputSet s;
    s.add_output("--out", c.path, c.kind);
    const std::string msg = refusal(s);
    if (c.tessera) {
      EXPECT_EQ(msg, "") << c.path;
    } else {
      EXPECT_NE(msg.find("--out '" + c.path + "' exists and is not"), std::string::npos) << msg;
      EXPECT_NE(msg.find("use --force to replace it"), std::string::npos) << msg;
    }
    EXPECT_EQ(refusal(s, true), "") << c.path;  // --force
  }
  EXPECT_EQ(slurp(user), "{\"mine\": 1}\n");
  // Partition in place: the input it may replace, not only Tessera's.
  OutputSet p;
  p.add_input("the input", user_text);
  p.add_output("the input (rewritten in place)", user_text, OutputKind::store, "the input");
  EXPECT_EQ(refusal(p), "");
}

TEST_F(IoOutput, ValidateAgreesOnEveryRank) {
  // Rank 0 checks; every rank gets the same CollectiveError.
  const std::string in = (fs::path(shared_) / "shared-in.tns").string();
  if (world().rank() == 0) std::ofstream(in) << "1 1 1 1.0\n";
  world().barrier();
  OutputSet s;
  s.add_input("the input", in);
  s.add_output("--out", in, OutputKind::text);
  std::string msg;
  try {
    s.validate(true, world());
  } catch (const CollectiveError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("is the same file as the input"), std::string::npos) << msg;
  // Accepted: every rank returns; the first rank of this host removed the stale temporary.
  const std::string out = (fs::path(shared_) / "shared-out.tns").string();
  const std::string stale = out + ".tmp-" + host() + "_" + std::to_string(dead_pid());
  if (world().rank() == 0) std::ofstream(stale) << "partial";
  world().barrier();
  OutputSet t;
  t.add_input("the input", in);
  t.add_output("--out", out, OutputKind::text);
  const std::size_t removed = t.validate(false, world());
  EXPECT_EQ(world().allreduce_value<std::uint64_t>(removed), 1u);
  EXPECT_FALSE(fs::exists(stale));
}

}  // namespace
}  // namespace tessera::io
