#include "tools/braidrun/etcd_json.h"

#include <charconv>

namespace braid::braidrun::etcd {
namespace {

constexpr int kMaxDepth = 64;

// A recursive-descent reader over `in`; `at` is the next unread byte.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  Result<JsonValue> document() {
    JsonValue v;
    RETURN_IF_ERROR(value(v, 0));
    skip_space();
    if (at_ != in_.size()) return fail("text after the end of the document");
    return v;
  }

 private:
  Status fail(const std::string& what) const {
    return protocol_error("malformed JSON from etcd at byte " + std::to_string(at_) + ": " + what);
  }
  void skip_space() {
    while (at_ < in_.size() && (in_[at_] == ' ' || in_[at_] == '\n' || in_[at_] == '\r' || in_[at_] == '\t')) ++at_;
  }
  bool take(char c) {
    skip_space();
    if (at_ < in_.size() && in_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool take_word(std::string_view w) {
    if (in_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }

  Status value(JsonValue& v, int depth) {
    if (depth > kMaxDepth) return fail("nested deeper than " + std::to_string(kMaxDepth));
    skip_space();
    if (at_ >= in_.size()) return fail("unexpected end");
    const char c = in_[at_];
    if (c == '{') return object(v, depth);
    if (c == '[') return array(v, depth);
    if (c == '"') {
      v.kind = JsonValue::Kind::string;
      return string(v.text);
    }
    if (take_word("true") || take_word("false")) {
      v.kind = JsonValue::Kind::boolean;
      v.text = c == 't' ? "true" : "false";
      return Status::ok();
    }
    if (take_word("null")) return Status::ok();
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t from = at_++;
      while (at_ < in_.size() && std::string_view("0123456789+-.eE").find(in_[at_]) != std::string_view::npos) ++at_;
      v.kind = JsonValue::Kind::number;
      v.text = std::string(in_.substr(from, at_ - from));
      return Status::ok();
    }
    return fail(std::string("unexpected character '") + c + "'");
  }

  Status object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::object;
    ++at_;  // '{'
    if (take('}')) return Status::ok();
    do {
      skip_space();
      std::string name;
      if (at_ >= in_.size() || in_[at_] != '"') return fail("expected a member name");
      RETURN_IF_ERROR(string(name));
      if (!take(':')) return fail("expected ':'");
      JsonValue member;
      RETURN_IF_ERROR(value(member, depth + 1));
      v.members.push_back(JsonValue::Member{std::move(name), std::move(member)});
    } while (take(','));
    if (!take('}')) return fail("expected ',' or '}'");
    return Status::ok();
  }

  Status array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::array;
    ++at_;  // '['
    if (take(']')) return Status::ok();
    do {
      JsonValue item;
      RETURN_IF_ERROR(value(item, depth + 1));
      v.items.push_back(std::move(item));
    } while (take(','));
    if (!take(']')) return fail("expected ',' or ']'");
    return Status::ok();
  }

  Result<uint32_t> hex4() {
    if (at_ + 4 > in_.size()) return fail("short \\u escape");
    uint32_t x = 0;
    auto [end, ec] = std::from_chars(in_.data() + at_, in_.data() + at_ + 4, x, 16);
    if (ec != std::errc() || end != in_.data() + at_ + 4) return fail("bad \\u escape");
    at_ += 4;
    return x;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status string(std::string& out) {
    ++at_;  // '"'
    for (;;) {
      if (at_ >= in_.size()) return fail("unterminated string");
      const char c = in_[at_++];
      if (c == '"') return Status::ok();
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= in_.size()) return fail("unterminated escape");
      const char e = in_[at_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          ASSIGN_OR_RETURN(uint32_t cp, hex4());
          // A high surrogate followed by a low one is one code point above the BMP.
          if (cp >= 0xD800 && cp < 0xDC00 && in_.substr(at_, 2) == "\\u") {
            at_ += 2;
            ASSIGN_OR_RETURN(uint32_t low, hex4());
            if (low >= 0xDC00 && low < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  std::string_view in_;
  size_t at_ = 0;
};

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;  // '-' and '_': the URL-safe alphabet reads too
  if (c == '/' || c == '_') return 63;
  return -1;
}

}  // namespace

const JsonValue* JsonValue::find(std::string_view name) const {
  for (const auto& [k, v] : members) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string JsonValue::text_of(std::string_view name) const {
  const JsonValue* v = find(name);
  return v && (v->kind == Kind::string || v->kind == Kind::number) ? v->text : std::string();
}

int64_t JsonValue::int_of(std::string_view name) const {
  const std::string t = text_of(name);
  int64_t x = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
  return ec == std::errc() && end == t.data() + t.size() ? x : 0;
}

bool JsonValue::bool_of(std::string_view name) const {
  const JsonValue* v = find(name);
  return v && v->kind == Kind::boolean && v->text == "true";
}

Result<JsonValue> parse_json(std::string_view text) { return Reader(text).document(); }

std::string json_quote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t x = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kBase64[(x >> shift) & 63];
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t x = uint32_t(uint8_t(bytes[i])) << 16;
    if (left == 2) x |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += kBase64[(x >> 18) & 63];
    out += kBase64[(x >> 12) & 63];
    out += left == 2 ? kBase64[(x >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] != '='; ++i) {
    const int d = base64_digit(text[i]);
    if (d < 0) return protocol_error("bad base64 from etcd at character " + std::to_string(i));
    acc = (acc << 6) | static_cast<uint32_t>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  for (; i < text.size(); ++i) {
    if (text[i] != '=') return protocol_error("bad base64 from etcd: data after its padding");
  }
  return out;
}

}  // namespace braid::braidrun::etcd
