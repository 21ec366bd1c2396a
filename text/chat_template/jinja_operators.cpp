#include "text/chat_template/jinja_operators.h"

#include <cmath>

namespace moert::text::jinja {

const char* operator_text(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSubtract: return "-";
    case BinaryOp::kMultiply: return "*";
    case BinaryOp::kDivide: return "/";
    case BinaryOp::kFloorDivide: return "//";
    case BinaryOp::kModulo: return "%";
    case BinaryOp::kPower: return "**";
    case BinaryOp::kConcat: return "~";
    case BinaryOp::kEqual: return "==";
    case BinaryOp::kNotEqual: return "!=";
    case BinaryOp::kLess: return "<";
    case BinaryOp::kGreater: return ">";
    case BinaryOp::kLessEqual: return "<=";
    case BinaryOp::kGreaterEqual: return ">=";
    case BinaryOp::kIn: return "in";
    case BinaryOp::kNotIn: return "not in";
  }
  return "?";
}

namespace {

[[noreturn]] void unsupported(BinaryOp op, const Value& a, const Value& b) {
  fail(std::string("Unknown operator \"") + operator_text(op) + "\" between " + type_name(a) + " and " + type_name(b));
}

[[noreturn]] void overflow(BinaryOp op) { fail(std::string("integer overflow in ") + operator_text(op)); }

// Undefined operands fail with Jinja's reason, none operands with the oracle's message.
void require_defined(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_none() || b.is_none()) fail(std::string("Cannot perform operation ") + operator_text(op) + " on null values");
}

int64_t integer_power(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if ((exponent & 1) != 0 && __builtin_mul_overflow(result, base, &result)) overflow(BinaryOp::kPower);
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) overflow(BinaryOp::kPower);
  }
  return result;
}

Value integer_arithmetic(BinaryOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd: if (__builtin_add_overflow(a, b, &r)) overflow(op); return Value::of_int(r);
    case BinaryOp::kSubtract: if (__builtin_sub_overflow(a, b, &r)) overflow(op); return Value::of_int(r);
    case BinaryOp::kMultiply: if (__builtin_mul_overflow(a, b, &r)) overflow(op); return Value::of_int(r);
    case BinaryOp::kDivide:
      if (b == 0) fail("division by zero");
      return Value::of_float(static_cast<double>(a) / static_cast<double>(b));
    case BinaryOp::kFloorDivide: {
      if (b == 0) fail("division by zero");
      if (a == INT64_MIN && b == -1) overflow(op);
      int64_t q = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --q;  // floor, as Python
      return Value::of_int(q);
    }
    case BinaryOp::kModulo:
      if (b == 0) fail("division by zero");
      return Value::of_int(b == -1 ? 0 : a % b);  // the sign of the dividend, as the oracle
    case BinaryOp::kPower:
      if (b < 0) return Value::of_float(std::pow(static_cast<double>(a), static_cast<double>(b)));
      return Value::of_int(integer_power(a, b));
    default: break;
  }
  return Value();
}

Value float_arithmetic(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd: return Value::of_float(a + b);
    case BinaryOp::kSubtract: return Value::of_float(a - b);
    case BinaryOp::kMultiply: return Value::of_float(a * b);
    case BinaryOp::kDivide:
      if (b == 0) fail("division by zero");
      return Value::of_float(a / b);
    case BinaryOp::kFloorDivide:
      if (b == 0) fail("division by zero");
      return Value::of_float(std::floor(a / b));
    case BinaryOp::kModulo:
      if (b == 0) fail("division by zero");
      return Value::of_float(std::fmod(a, b));
    case BinaryOp::kPower: return Value::of_float(std::pow(a, b));
    default: break;
  }
  return Value();
}

Value concatenate(RenderHeap& heap, const Value& a, const Value& b) {
  TextSink sink(heap);
  write_concatenated(sink, a);
  write_concatenated(sink, b);
  return heap.string_value(std::move(sink.text()));
}

bool contains(RenderHeap& heap, const Value& needle, const Value& haystack, BinaryOp op) {
  switch (haystack.type) {
    case Type::kUndefined: return false;
    case Type::kNone: fail(std::string("Cannot perform operation ") + operator_text(op) + " on null values");
    case Type::kString:
      if (!needle.is_string()) unsupported(op, needle, haystack);
      heap.charge_search(haystack.str().size(), needle.str().size());
      return haystack.str().find(needle.str()) != std::string::npos;
    case Type::kList:
      for (const Value& item : haystack.list->items) {
        if (equal(heap, needle, item)) return true;
      }
      return false;
    case Type::kDict:
    case Type::kNamespace:
      return needle.is_string() && haystack.dict->find(needle.str()) != nullptr;
    default: unsupported(op, needle, haystack);
  }
}

}  // namespace

Value negate(const Value& v) {
  if (v.type == Type::kInt) {
    if (v.integer == INT64_MIN) fail("integer overflow in -");
    return Value::of_int(-v.integer);
  }
  if (v.type == Type::kFloat) return Value::of_float(-v.number);
  if (v.is_undefined()) fail_undefined(v);
  fail(std::string("Unknown unary operator \"-\" on ") + type_name(v));
}

Value binary_operation(RenderHeap& heap, BinaryOp op, const Value& a, const Value& b) {
  switch (op) {
    case BinaryOp::kEqual: return Value::of_bool(equal(heap, a, b));
    case BinaryOp::kNotEqual: return Value::of_bool(!equal(heap, a, b));
    case BinaryOp::kIn: return Value::of_bool(contains(heap, a, b, op));
    case BinaryOp::kNotIn: return Value::of_bool(!contains(heap, a, b, op));
    case BinaryOp::kConcat:
      if (a.is_none() || b.is_none()) fail("Cannot perform operation ~ on null values");
      return concatenate(heap, a, b);
    case BinaryOp::kLess:
    case BinaryOp::kGreater:
    case BinaryOp::kLessEqual:
    case BinaryOp::kGreaterEqual: {
      require_defined(op, a, b);
      const bool comparable = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string());
      if (!comparable) unsupported(op, a, b);
      const int c = compare(a, b);
      if (op == BinaryOp::kLess) return Value::of_bool(c < 0);
      if (op == BinaryOp::kGreater) return Value::of_bool(c > 0);
      if (op == BinaryOp::kLessEqual) return Value::of_bool(c <= 0);
      return Value::of_bool(c >= 0);
    }
    default: break;
  }
  require_defined(op, a, b);
  if (op == BinaryOp::kAdd) {
    if (a.is_string() || b.is_string()) return concatenate(heap, a, b);
    if (a.is_list() && b.is_list()) {
      const size_t n = a.list->items.size() + b.list->items.size();
      List* list = heap.new_list(n);
      list->items = a.list->items;
      list->items.insert(list->items.end(), b.list->items.begin(), b.list->items.end());
      return Value::of_list(list);
    }
  }
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  if (a.type == Type::kInt && b.type == Type::kInt) return integer_arithmetic(op, a.integer, b.integer);
  return float_arithmetic(op, a.as_double(), b.as_double());
}

}  // namespace moert::text::jinja
