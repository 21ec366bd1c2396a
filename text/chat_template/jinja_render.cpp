// The tree walk of a render (docs/chat_template.md, "Design", "Loops", "Errors and limits").
// Invariants: every statement and expression evaluated passes through a Frame, which counts one
// step, one level of max_depth and records the node's source offset, so a failure anywhere
// (values, builtins) is reported at the innermost node; all state of a render lives in the
// Renderer and its RenderHeap, never in the shared Program.
#include "text/chat_template/jinja_render.h"

#include <algorithm>
#include <ctime>
#include <exception>

#include "text/chat_template/jinja_builtins.h"
#include "text/chat_template/jinja_operators.h"
#include "text/chat_template/jinja_unicode.h"

namespace moert::text::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

// The attributes of `loop`, in the order the loop dict holds them.
const std::string (&loop_keys())[9] {
  static const std::string keys[9] = {"index", "index0", "revindex", "revindex0", "first",
                                      "last",  "length", "previtem", "nextitem"};
  return keys;
}

CivilTime local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return CivilTime{tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec};
}

template <class Json>
const char* json_type_name(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "NullValue";
    case nlohmann::json::value_t::boolean: return "BooleanValue";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "IntegerValue";
    case nlohmann::json::value_t::number_float: return "FloatValue";
    case nlohmann::json::value_t::string: return "StringValue";
    case nlohmann::json::value_t::array: return "ArrayValue";
    case nlohmann::json::value_t::object: return "ObjectValue";
    default: return "UnknownValue";
  }
}

class Renderer {
 public:
  Renderer(const Program& program, const RenderOptions& options)
      : program_(program), options_(options), heap_(options), now_(options.now ? *options.now : local_now()) {}

  template <class Json>
  std::string run(const Json& context) {
    try {
      Scope* builtins = heap_.new_scope(nullptr);
      add_globals(heap_, *builtins);
      Scope* globals = heap_.new_scope(builtins);
      bind_context(context, *builtins, *globals);
      TextSink out(heap_);
      exec_body(program_.body, globals, out);
      return std::move(out.text());
    } catch (const RenderFailure& failure) {
      if (!position_known_) throw ChatTemplateError(failure.kind, 0, 0, failure.message);
      throw program_.source.error(failure.kind, position_, failure.message);
    }
  }

 private:
  // One level of evaluation (see the file comment). On unwinding the position is left at the
  // failing node.
  class Frame {
   public:
    Frame(Renderer& r, uint32_t offset) : r_(r), saved_(r.position_), exceptions_(std::uncaught_exceptions()) {
      if (++r.depth_ > r.options_.max_depth) {
        fail_limit("the render nested deeper than max_depth (" + std::to_string(r.options_.max_depth) + ")");
      }
      r.heap_.charge();
      r.position_ = offset;
      r.position_known_ = true;
    }
    ~Frame() {
      --r_.depth_;
      if (std::uncaught_exceptions() == exceptions_) r_.position_ = saved_;
    }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    Renderer& r_;
    uint32_t saved_;
    int exceptions_;
  };

  // ---- Context ----------------------------------------------------------------------------------
  template <class Json>
  void bind_context(const Json& context, const Scope& builtins, Scope& globals) {
    if (!context.is_object()) fail(std::string("the context must be a JSON object, got ") + json_type_name(context));
    for (auto it = context.begin(); it != context.end(); ++it) {
      const std::string& name = it.key();
      if (builtins.find(name) != nullptr) fail("the context variable '" + name + "' would replace the built-in of that name");
      globals.set(name, from_json(it.value(), 0));
    }
  }

  // Strings and keys are not copied: they point into the caller's JSON, which outlives the render.
  template <class Json>
  Value from_json(const Json& j, int depth) {
    if (depth > kMaxValueNesting) fail("the context is nested deeper than " + std::to_string(kMaxValueNesting) + " levels");
    switch (j.type()) {
      case nlohmann::json::value_t::boolean: return Value::of_bool(j.template get<bool>());
      case nlohmann::json::value_t::number_integer: return Value::of_int(j.template get<int64_t>());
      case nlohmann::json::value_t::number_unsigned: {
        const uint64_t u = j.template get<uint64_t>();
        return u <= static_cast<uint64_t>(INT64_MAX) ? Value::of_int(static_cast<int64_t>(u))
                                                     : Value::of_float(static_cast<double>(u));
      }
      case nlohmann::json::value_t::number_float: return Value::of_float(j.template get<double>());
      case nlohmann::json::value_t::string: return Value::of_string(j.template get_ptr<const std::string*>());
      case nlohmann::json::value_t::array: {
        List* list = heap_.new_list(j.size());
        for (const auto& item : j) list->items.push_back(from_json(item, depth + 1));
        return Value::of_list(list);
      }
      case nlohmann::json::value_t::object: {
        Dict* dict = heap_.new_dict();
        heap_.charge(static_cast<int64_t>(j.size()));
        for (auto it = j.begin(); it != j.end(); ++it) dict->entries.emplace_back(&it.key(), from_json(it.value(), depth + 1));
        return Value::of_dict(dict);
      }
      default: return Value::none();
    }
  }

  // ---- Statements -------------------------------------------------------------------------------
  Flow exec_body(const std::vector<Stmt>& body, Scope* scope, TextSink& out) {
    for (const Stmt& s : body) {
      const Flow flow = exec(s, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, Scope* scope, TextSink& out) {
    Frame frame(*this, s.offset);
    switch (s.kind) {
      case StmtKind::kText: out.append(s.text); return Flow::kNormal;
      case StmtKind::kOutput: write_printed(out, eval(*s.value, scope)); return Flow::kNormal;
      case StmtKind::kIf: return exec_body(truthy(eval(*s.value, scope)) ? s.body : s.else_body, scope, out);
      case StmtKind::kFor: return exec_for(s, scope, out);
      case StmtKind::kSet: assign(s, eval(*s.value, scope), scope); return Flow::kNormal;
      case StmtKind::kSetBlock: {
        TextSink captured(heap_);
        const Flow flow = exec_body(s.body, scope, captured);
        assign(s, heap_.string_value(std::move(captured.text())), scope);
        return flow;
      }
      case StmtKind::kMacro: {
        Function macro;
        macro.kind = Function::Kind::kMacro;
        macro.code = &s;
        macro.closure = scope;
        scope->set(s.text, Value::of_function(heap_.new_function(macro)));
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: {
        const Expr& call = *s.value;
        const Value callee = callable(eval(*call.operand, scope));
        const Arguments args = eval_arguments(call.args, scope);
        Function caller;
        caller.kind = Function::Kind::kCaller;
        caller.code = &s;
        caller.closure = scope;
        write_printed(out, invoke(*callee.function, args, Value::of_function(heap_.new_function(caller))));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        TextSink captured(heap_);
        const Flow flow = exec_body(s.body, scope, captured);
        Value v = heap_.string_value(std::move(captured.text()));
        for (const FilterCall& f : s.filters) v = apply_filter(heap_, f.name, v, eval_arguments(f.args, scope));
        write_printed(out, v);
        return flow;
      }
      case StmtKind::kBreak:
      case StmtKind::kContinue: {
        const bool is_break = s.kind == StmtKind::kBreak;
        if (loop_depth_ == 0) fail(is_break ? "{% break %} outside a for loop" : "{% continue %} outside a for loop");
        return is_break ? Flow::kBreak : Flow::kContinue;
      }
    }
    return Flow::kNormal;
  }

  // A loop has one scope for all its iterations; `if` items are selected before it starts, so
  // `loop` counts selected items; else runs when nothing was selected (docs, "Loops").
  Flow exec_for(const Stmt& s, Scope* scope, TextSink& out) {
    const Value iterable = eval(*s.value, scope);
    std::vector<Value> items;
    switch (iterable.type) {
      case Type::kUndefined: break;
      case Type::kList: items = iterable.list->items; break;
      case Type::kDict:
      case Type::kNamespace:
        for (const auto& entry : iterable.dict->entries) items.push_back(Value::of_string(entry.first));
        break;
      case Type::kString: {
        const std::string& text = iterable.str();
        for (size_t pos = 0; pos < text.size();) {
          const size_t start = pos;
          next_code_point(text, pos);
          items.push_back(heap_.string_value(text.substr(start, pos - start)));
        }
        break;
      }
      default: fail(std::string("Expected iterable or object type in for loop: got ") + type_name(iterable));
    }
    heap_.charge(static_cast<int64_t>(items.size()));
    Scope* loop_scope = heap_.new_scope(scope);
    if (s.condition) {
      std::vector<Value> selected;
      for (const Value& item : items) {
        bind(s.names, item, loop_scope);
        if (truthy(eval(*s.condition, loop_scope))) selected.push_back(item);
      }
      items = std::move(selected);
    }
    if (items.empty()) return exec_body(s.else_body, scope, out);

    Dict* info = heap_.new_dict();
    for (const std::string& key : loop_keys()) info->entries.emplace_back(&key, Value());
    const int64_t n = static_cast<int64_t>(items.size());
    ++loop_depth_;
    for (int64_t i = 0; i < n; ++i) {
      bind(s.names, items[static_cast<size_t>(i)], loop_scope);
      auto& e = info->entries;
      e[0].second = Value::of_int(i + 1);
      e[1].second = Value::of_int(i);
      e[2].second = Value::of_int(n - i);
      e[3].second = Value::of_int(n - i - 1);
      e[4].second = Value::of_bool(i == 0);
      e[5].second = Value::of_bool(i == n - 1);
      e[6].second = Value::of_int(n);
      e[7].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value();
      e[8].second = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value();
      loop_scope->set("loop", Value::of_dict(info));  // the body may have replaced it
      if (exec_body(s.body, loop_scope, out) == Flow::kBreak) break;
    }
    --loop_depth_;
    return Flow::kNormal;
  }

  // `names` = v, unpacking a list or tuple when there are several names.
  void bind(const std::vector<std::string>& names, const Value& v, Scope* scope) {
    if (names.size() == 1) {
      scope->set(names[0], v);
      return;
    }
    if (!v.is_list()) fail(std::string("Cannot unpack non-iterable type: ") + type_name(v));
    const std::vector<Value>& items = v.list->items;
    if (items.size() < names.size()) fail("Too few items to unpack");
    if (items.size() > names.size()) fail("Too many items to unpack");
    for (size_t i = 0; i < names.size(); ++i) scope->set(names[i], items[i]);
  }

  void assign(const Stmt& s, const Value& v, Scope* scope) {
    if (s.attribute.empty()) {
      bind(s.names, v, scope);
      return;
    }
    const Value* target = scope->find(s.names[0]);
    if (target == nullptr || target->type != Type::kNamespace) fail("cannot assign attribute on non-namespace object");
    target->dict->set(&s.attribute, v);
  }

  // ---- Calls ------------------------------------------------------------------------------------
  static Value callable(const Value& v) {
    if (v.is_undefined()) fail_undefined(v);
    if (v.type != Type::kFunction) fail(std::string("Cannot call something that is not a function: got ") + type_name(v));
    return v;
  }

  Arguments eval_arguments(const std::vector<Argument>& args, Scope* scope) {
    Arguments out;
    for (const Argument& a : args) {
      const Value v = eval(*a.value, scope);
      switch (a.kind) {
        case Argument::Kind::kPositional: out.positional.push_back(v); break;
        case Argument::Kind::kKeyword: out.keywords.emplace_back(&a.keyword, v); break;
        case Argument::Kind::kSpreadList:
          if (!v.is_list()) fail(std::string("*arguments must be a list, got ") + type_name(v));
          out.positional.insert(out.positional.end(), v.list->items.begin(), v.list->items.end());
          break;
        case Argument::Kind::kSpreadDict:
          if (!v.is_mapping()) fail(std::string("**arguments must be a dict, got ") + type_name(v));
          for (const auto& entry : v.dict->entries) out.keywords.push_back(entry);
          break;
      }
    }
    return out;
  }

  Value invoke(const Function& f, const Arguments& args, const Value& caller) {
    if (f.kind == Function::Kind::kBuiltin) return call_builtin(heap_, f, args, now_);
    return call_macro(*f.code, f.closure, args, caller);
  }

  // A macro (or the body of a call block, for caller()): parameters bound from the arguments or
  // their defaults, the rest in varargs / kwargs; the result is the text the body printed.
  Value call_macro(const Stmt& code, Scope* closure, const Arguments& args, const Value& caller) {
    Scope* scope = heap_.new_scope(closure);
    const std::vector<Parameter>& params = code.params;
    for (size_t i = 0; i < params.size(); ++i) {
      Value v = args.get(i, params[i].name);
      if (v.is_undefined() && i >= args.positional.size()) {
        v = params[i].default_value ? eval(*params[i].default_value, scope) : Value::undefined_variable(&params[i].name);
      }
      scope->set(params[i].name, v);
    }
    List* varargs = heap_.new_list();
    for (size_t i = params.size(); i < args.positional.size(); ++i) varargs->items.push_back(args.positional[i]);
    Dict* kwargs = heap_.new_dict();
    for (const auto& keyword : args.keywords) {
      const bool is_parameter =
          std::any_of(params.begin(), params.end(), [&](const Parameter& p) { return p.name == *keyword.first; });
      if (!is_parameter) kwargs->set(keyword.first, keyword.second);
    }
    scope->set("varargs", Value::of_list(varargs));
    scope->set("kwargs", Value::of_dict(kwargs));
    if (!caller.is_undefined()) scope->set("caller", caller);
    TextSink out(heap_);
    const int loops_outside = loop_depth_;
    loop_depth_ = 0;  // break / continue do not cross a call
    exec_body(code.body, scope, out);
    loop_depth_ = loops_outside;
    return heap_.string_value(std::move(out.text()));
  }

  // ---- Expressions ------------------------------------------------------------------------------
  Value eval(const Expr& e, Scope* scope) {
    Frame frame(*this, e.offset);
    switch (e.kind) {
      case ExprKind::kLiteral:
        switch (e.literal.kind) {
          case Literal::Kind::kInt: return Value::of_int(e.literal.integer);
          case Literal::Kind::kFloat: return Value::of_float(e.literal.number);
          case Literal::Kind::kString: return Value::of_string(&e.literal.text);
        }
        return Value();
      case ExprKind::kVariable: {
        const Value* v = scope->find(e.name);
        return v != nullptr ? *v : Value::undefined_variable(&e.name);
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List* list = heap_.new_list(e.items.size());
        for (const ExprPtr& item : e.items) list->items.push_back(eval(*item, scope));
        return Value::of_list(list, e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: return eval_dict(e, scope);
      case ExprKind::kAttribute: return get_attribute(heap_, eval(*e.operand, scope), &e.name);
      case ExprKind::kItem: {
        const Value object = eval(*e.operand, scope);
        return get_item(heap_, object, eval(*e.second, scope));
      }
      case ExprKind::kSlice: {
        const Value object = eval(*e.operand, scope);
        Value bounds[3];
        for (size_t i = 0; i < 3; ++i) {
          if (e.items[i]) bounds[i] = eval(*e.items[i], scope);
        }
        return get_slice(heap_, object, bounds[0], bounds[1], bounds[2]);
      }
      case ExprKind::kCall: {
        const Value callee = callable(eval(*e.operand, scope));
        return invoke(*callee.function, eval_arguments(e.args, scope), Value());
      }
      case ExprKind::kFilter: {
        const Value input = eval(*e.operand, scope);
        return apply_filter(heap_, e.filter.name, input, eval_arguments(e.filter.args, scope));
      }
      case ExprKind::kTest: {
        const Value input = eval(*e.operand, scope);
        return Value::of_bool(apply_test(heap_, e.name, input, eval_arguments(e.args, scope)) != e.negated);
      }
      case ExprKind::kNegate: return negate(eval(*e.operand, scope));
      case ExprKind::kPlus: {
        const Value v = eval(*e.operand, scope);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) fail(std::string("Unknown unary operator \"+\" on ") + type_name(v));
        return v;
      }
      case ExprKind::kNot: return Value::of_bool(!truthy(eval(*e.operand, scope)));
      case ExprKind::kAnd: {
        const Value left = eval(*e.operand, scope);
        return truthy(left) ? eval(*e.second, scope) : left;
      }
      case ExprKind::kOr: {
        const Value left = eval(*e.operand, scope);
        return truthy(left) ? left : eval(*e.second, scope);
      }
      case ExprKind::kConditional:
        if (truthy(eval(*e.second, scope))) return eval(*e.operand, scope);
        return e.third ? eval(*e.third, scope) : Value();
      case ExprKind::kBinary: {
        const Value left = eval(*e.operand, scope);
        const Value right = eval(*e.second, scope);
        return binary_operation(heap_, e.op, left, right);
      }
    }
    return Value();
  }

  Value eval_dict(const Expr& e, Scope* scope) {
    Dict* dict = heap_.new_dict();
    for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
      const Value key = eval(*e.items[i], scope);
      if (!key.is_string()) fail(std::string("Object keys must be strings: got ") + type_name(key));
      dict->set(key.string, eval(*e.items[i + 1], scope));
    }
    return Value::of_dict(dict);
  }

  const Program& program_;
  const RenderOptions& options_;
  RenderHeap heap_;
  CivilTime now_;
  uint32_t position_ = 0;  // source offset of the innermost node being evaluated
  bool position_known_ = false;
  int depth_ = 0;       // evaluation nesting, bounded by max_depth
  int loop_depth_ = 0;  // for loops around the current statement within the current call
};

}  // namespace

std::string render_program(const Program& program, const nlohmann::ordered_json& context, const RenderOptions& options) {
  return Renderer(program, options).run(context);
}

std::string render_program(const Program& program, const nlohmann::json& context, const RenderOptions& options) {
  return Renderer(program, options).run(context);
}

}  // namespace moert::text::jinja
