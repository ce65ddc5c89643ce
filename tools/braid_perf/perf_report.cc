#include "tools/braid_perf/perf_report.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "braid_config.h"

namespace braid::perf {
namespace {

std::string printf_string(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// nccl-tests' widths: fewer decimals as the time grows.
std::string format_time(double us) {
  return printf_string(us >= 10000 ? "%8.0f" : us >= 100 ? "%8.1f" : "%8.2f", us);
}

std::string format_timing(const Timing& t) {
  if (!t.ran) return printf_string(" %8s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
  std::string wrong = t.wrong < 0 ? "N/A" : std::to_string(t.wrong);
  std::string out = " ";
  out += format_time(t.time_us);
  out += printf_string(" %7.3f %7.3f %6s", t.algbw, t.busbw, wrong.c_str());
  return out;
}

std::string redop_name(const std::string& op, Op redop) { return is_reducing(op) ? to_string(redop) : "none"; }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\', out += static_cast<char>(ch);
    else if (ch < 0x20) out += printf_string("\\u%04x", ch);
    else out += static_cast<char>(ch);
  }
  return out + "\"";
}

std::string json_strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_string(v[i]);
  return out + "]";
}

std::string json_timing(const Timing& t) {
  if (!t.ran) return "null";
  return printf_string("{\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": %s}", t.time_us,
                       t.algbw, t.busbw, t.wrong < 0 ? "null" : std::to_string(t.wrong).c_str());
}

std::string env_value(const RunInfo& info, const std::string& name, const std::string& fallback) {
  for (const std::string& kv : info.env) {
    if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
  }
  return fallback;
}

// The header's transport lines: one when every rank sees its peers alike, else one per rank.
std::string transport_lines(const RunInfo& info) {
  if (info.transports.empty()) return "";
  std::vector<std::string> grouped;
  for (const auto& t : info.transports) grouped.push_back(group_transports(t));
  bool alike = true;
  for (const std::string& g : grouped) alike = alike && g == grouped[0];
  if (alike) return "# transports: " + grouped[0] + " (every rank, to its peers)\n";
  std::string out;
  for (size_t r = 0; r < grouped.size(); ++r) {
    out += printf_string("# transports: rank %zu to its peers: %s\n", r, grouped[r].c_str());
  }
  return out;
}

}  // namespace

std::string group_transports(const std::vector<std::string>& per_peer) {
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& t : per_peer) {
    if (t == "self") continue;
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == t; });
    if (it == counts.end()) counts.emplace_back(t, 1);
    else ++it->second;
  }
  if (counts.empty()) return "none";
  std::string out;
  for (const auto& [name, n] : counts) out += (out.empty() ? "" : ", ") + name + " x" + std::to_string(n);
  return out;
}

std::string format_header(const PerfOptions& opt, const RunInfo& info) {
  std::string h = "# " + info.version + "\n";
  h += printf_string("# %s, %d ranks, %d iterations (+%d warm-up), %d operation%s per iteration (-m)\n", opt.op.c_str(),
                     info.ranks, opt.iters, opt.warmup, opt.agg, opt.agg == 1 ? "" : "s");
  h += !opt.blocking     ? "# time: mean over iterations issued back to back (-z 0)"
       : opt.barrier_each ? "# time: median over iterations, each timed alone after a barrier (-z 1)"
                          : "# time: median over iterations, each timed alone, one after another without a barrier "
                            "(-z 1 --barrier 0)";
  if (opt.blocking && opt.agg == 1) {
    h += opt.blocking_calls ? "; blocking calls (--calls blocking)" : "; *_async calls and Work::wait() (--calls async)";
  }
  h += printf_string("; ranks' times combined by %s (-a %d); GB/s = 1e9 bytes/s\n", to_string(opt.average),
                     static_cast<int>(opt.average));
  h += opt.check_iters > 0 ? printf_string("# check: %d iteration%s per column against exact results (-c %d)\n",
                                           opt.check_iters, opt.check_iters == 1 ? "" : "s", opt.check_iters)
                           : "# check: off (-c 0): #wrong is N/A\n";
  for (size_t r = 0; r < info.hosts.size(); ++r) {
    h += printf_string("#  rank %3zu pid %7d on %s\n", r, r < info.pids.size() ? info.pids[r] : 0, info.hosts[r].c_str());
  }
  h += transport_lines(info);
  for (const std::string& note : opt.notes) h += "# note: " + note + "\n";
  h += "#\n";
  h += printf_string("#%11s %12s %6s %6s %5s %9s %32s %32s\n", "", "", "", "", "", "", "out-of-place       ",
                     "in-place       ");
  h += printf_string("#%11s %12s %6s %6s %5s %9s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop",
                     "root", "algo", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  h += printf_string("#%11s %12s %6s %6s %5s %9s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "",
                     "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return h;
}

std::string format_row(const PerfOptions& opt, const Row& row) {
  return printf_string(" %11zu %12zu %6s %6s %5d %9s", row.bytes, row.count, to_string(row.dtype),
                       redop_name(opt.op, row.redop).c_str(), row.root, row.algo.c_str()) +
         format_timing(row.out_of_place) + format_timing(row.in_place) + "\n";
}

int64_t total_wrong(const std::vector<RowRecord>& rows) {
  int64_t wrong = -1;
  for (const RowRecord& r : rows) {
    for (const Timing* t : {&r.row.out_of_place, &r.row.in_place}) {
      if (t->ran && t->wrong >= 0) wrong = (wrong < 0 ? 0 : wrong) + t->wrong;
    }
  }
  return wrong;
}

std::string format_footer(const PerfOptions& opt, const std::vector<RowRecord>& rows) {
  double sum = 0;
  int columns = 0;
  for (const RowRecord& r : rows) {
    for (const Timing* t : {&r.row.out_of_place, &r.row.in_place}) {
      if (!t->ran) continue;
      sum += t->busbw;
      ++columns;
    }
  }
  const int64_t wrong = total_wrong(rows);
  std::string f = opt.check_iters == 0 ? "# Out of bounds values : N/A (not checked, -c 0)\n"
                                       : printf_string("# Out of bounds values : %lld %s\n",
                                                       static_cast<long long>(wrong < 0 ? 0 : wrong),
                                                       wrong > 0 ? "FAILED" : "OK");
  f += printf_string("# Avg bus bandwidth    : %.4f GB/s\n#\n", columns ? sum / columns : 0.0);
  return f;
}

std::string format_json(const PerfOptions& opt, const RunInfo& info, const std::vector<RowRecord>& rows) {
  std::string j = "{\n";
  j += "  \"tool\": \"braid-perf\",\n  \"version\": " + json_string(BRAID_VERSION) + ",\n";
  j += "  \"build\": " + json_string(info.version) + ",\n";
  j += "  \"label\": " + (opt.label.empty() ? std::string("null") : json_string(opt.label)) + ",\n";
  j += "  \"timestamp\": " + json_string(info.timestamp) + ",\n";
  j += "  \"command_line\": " + json_strings(info.command_line) + ",\n";
  j += "  \"op\": " + json_string(opt.op) + ",\n";
  j += printf_string("  \"ranks\": %d,\n  \"hosts\": %s,\n", info.ranks, json_strings(info.hosts).c_str());
  j += "  \"peers\": [";
  for (size_t r = 0; r < info.hosts.size(); ++r) {
    j += printf_string("%s{\"rank\": %zu, \"host\": %s, \"pid\": %d, \"same_host_as_rank0\": %s}", r ? ", " : "", r,
                       json_string(info.hosts[r]).c_str(), r < info.pids.size() ? info.pids[r] : 0,
                       info.hosts[r] == info.hosts[0] ? "true" : "false");
  }
  j += "],\n";
  // What was asked for, and what each rank's connection to each peer took (per_peer[r][p]).
  j += "  \"transport\": {\"requested\": " + json_string(env_value(info, "BRAID_TRANSPORT", "auto")) +
       ", \"per_peer\": [";
  for (size_t r = 0; r < info.transports.size(); ++r) j += (r ? ", " : "") + json_strings(info.transports[r]);
  j += "], \"summary\": [";
  for (size_t r = 0; r < info.transports.size(); ++r) {
    j += (r ? ", " : "") + json_string(group_transports(info.transports[r]));
  }
  j += "]},\n";
  j += "  \"algorithm\": {\"requested\": " +
       json_string(!opt.algo.empty() ? opt.algo : env_value(info, "BRAID_ALGO", "auto")) +
       ", \"note\": \"each row's algo is what ran\"},\n";
  j += printf_string(
      "  \"settings\": {\"iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, \"check_iters\": %d, \"blocking\": %d, "
      "\"barrier\": %d, \"calls\": \"%s\", \"average\": %s, \"run_cycles\": %d, \"minbytes\": %zu, \"maxbytes\": %zu, \"stepbytes\": %zu, "
      "\"stepfactor\": %zu},\n",
      opt.iters, opt.warmup, opt.agg, opt.check_iters, opt.blocking ? 1 : 0, opt.barrier_each ? 1 : 0, opt.blocking_calls ? "blocking" : "async",
      json_string(to_string(opt.average)).c_str(),
      opt.cycles, opt.min_bytes, opt.max_bytes, opt.step_bytes, opt.step_factor);
  j += "  \"env\": " + json_strings(info.env) + ",\n";
  j += "  \"notes\": " + json_strings(opt.notes) + ",\n";
  j += "  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i].row;
    j += printf_string("    {\"cycle\": %d, \"op\": %s, \"bytes\": %zu, \"count\": %zu, \"dtype\": \"%s\", \"redop\": \"%s\", "
                       "\"root\": %d, \"algo\": %s, ",
                       rows[i].cycle, json_string(opt.op).c_str(), r.bytes, r.count, to_string(r.dtype),
                       redop_name(opt.op, r.redop).c_str(), r.root, json_string(r.algo).c_str());
    j += "\"out_of_place\": " + json_timing(r.out_of_place) + ", \"in_place\": " + json_timing(r.in_place) + "}";
    j += i + 1 < rows.size() ? ",\n" : "\n";
  }
  j += "  ],\n";
  double sum = 0;
  int columns = 0;
  for (const RowRecord& rr : rows) {
    for (const Timing* t : {&rr.row.out_of_place, &rr.row.in_place}) {
      if (t->ran) sum += t->busbw, ++columns;
    }
  }
  const int64_t wrong = total_wrong(rows);
  j += printf_string("  \"avg_busbw_gbps\": %.6f,\n  \"wrong\": %s\n}\n", columns ? sum / columns : 0.0,
                     wrong < 0 ? "null" : std::to_string(wrong).c_str());
  return j;
}

}  // namespace braid::perf
