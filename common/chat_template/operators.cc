// Python arithmetic, concatenation, repetition and membership for template values.
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/chat_template/builtins.h"
#include "common/tokenizer/utf8.h"
#include "common/chat_template/py_str.h"
#include "common/chat_template/renderer.h"
#include "common/status.h"

namespace xserv::chat_template {
namespace {

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return absl::InvalidArgumentError(a.undefined_message());
  if (b.is_undefined()) return absl::InvalidArgumentError(b.undefined_message());
  if (op == "+" && a.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
  }
  if (op == "+" && a.is_list() && !a.is_tuple()) {
    return absl::InvalidArgumentError(
        absl::StrCat("can only concatenate list (not \"", b.TypeName(), "\") to list"));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ",
                                                 std::string(op), ": '", a.TypeName(), "' and '",
                                                 b.TypeName(), "'"));
}

absl::Status Overflow() { return absl::InvalidArgumentError("integer overflow"); }

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

double FloatMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

absl::StatusOr<Value> Repeat(Renderer& r, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::String("") : Value::List({});
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > r.limits().max_output_bytes / s.size()) {
      return r.CheckSize(r.limits().max_output_bytes + 1);
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::String(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) * items.size() > (1u << 20)) {
    return absl::ResourceExhaustedError("list repetition too large");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

// printf-style `str % args` with the conversions templates use: s r d i f g e x o c %.
absl::StatusOr<Value> FormatPercent(Renderer& r, const std::string& fmt, const Value& arg) {
  std::vector<Value> args;
  if (arg.is_tuple()) {
    args = arg.items();
  } else {
    args.push_back(arg);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    ++i;
    if (i >= fmt.size()) return absl::InvalidArgumentError("incomplete format");
    std::string spec = "%";
    while (i < fmt.size() &&
           std::string_view("-+ #0123456789.").find(fmt[i]) != std::string_view::npos) {
      spec.push_back(fmt[i++]);
    }
    if (i >= fmt.size()) return absl::InvalidArgumentError("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) {
      return absl::InvalidArgumentError("not enough arguments for format string");
    }
    const Value& v = args[next++];
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? PyStr(v) : PyRepr(v);
        if (spec == "%") {
          out += s;
        } else {
          int width = std::atoi(spec.c_str() + 1 + (spec.size() > 1 && spec[1] == '-'));
          std::string pad(static_cast<size_t>(std::max<int64_t>(
                              0, width - static_cast<int64_t>(py::CodePointCount(s)))),
                          ' ');
          out += (spec.size() > 1 && spec[1] == '-') ? s + pad : pad + s;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        if (!v.is_number()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "%", std::string(1, conv), " format: a number is required, not ", v.TypeName()));
        }
        long long n = v.is_float() ? static_cast<long long>(v.as_double()) : v.as_int();
        if (conv == 'c') {
          tokenizer::AppendUtf8(static_cast<char32_t>(n), &out);
          break;
        }
        std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) {
          return absl::InvalidArgumentError(
              absl::StrCat("must be real number, not ", v.TypeName()));
        }
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_double());
        out += buf;
        break;
      }
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
    }
    RETURN_IF_ERROR(r.CheckSize(out.size()));
  }
  // Like Python, a mapping or list operand with unused items is not an error.
  if (next < args.size() && !arg.is_dict() && !(arg.is_list() && !arg.is_tuple())) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return Overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return Overflow();
  }
  return Value::Int(result);
}

}  // namespace

absl::StatusOr<Value> BinaryOp(Renderer& r, std::string_view op, const Value& a, const Value& b) {
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t out;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &out)) return Overflow();
      return Value::Int(out);
    }
    if (nums) return Value::Float(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(r.CheckSize(a.str().size() + b.str().size()));
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    return Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t out;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &out)) return Overflow();
      return Value::Int(out);
    }
    if (nums) return Value::Float(a.as_double() - b.as_double());
    return Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t out;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &out)) return Overflow();
      return Value::Int(out);
    }
    if (nums) return Value::Float(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
      return Repeat(r, a, b.as_int());
    }
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
      return Repeat(r, b, a.as_int());
    }
    return Unsupported(op, a, b);
  }
  if (op == "/" || op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return FormatPercent(r, a.str(), b);
    if (!nums) return Unsupported(op, a, b);
    if (b.as_double() == 0) {
      return absl::InvalidArgumentError(ints && op != "/" ? "integer division or modulo by zero"
                                                          : "division by zero");
    }
    if (op == "/") return Value::Float(a.as_double() / b.as_double());
    if (ints) {
      if (a.as_int() == INT64_MIN && b.as_int() == -1) return Overflow();
      return Value::Int(op == "//" ? FloorDiv(a.as_int(), b.as_int())
                                   : FloorMod(a.as_int(), b.as_int()));
    }
    if (op == "//") return Value::Float(std::floor(a.as_double() / b.as_double()));
    return Value::Float(FloatMod(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) return IntPow(a.as_int(), b.as_int());
    if (nums) {
      if (a.as_double() == 0 && b.as_double() < 0) {
        return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
      }
      return Value::Float(std::pow(a.as_double(), b.as_double()));
    }
    return Unsupported(op, a, b);
  }
  return absl::InternalError(absl::StrCat("unknown operator ", std::string(op)));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (PyEquals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.dict().Find(item) != nullptr;
    case Value::Kind::kNamespace:
      return item.is_string() && container.ns().attrs.Find(item.str()) != nullptr;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

}  // namespace xserv::chat_template
