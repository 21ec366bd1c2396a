#!/usr/bin/env node
// Makes tests/data/grammar/oracle.json (docs/structured-output.md, "Tests"): the verdicts of
// npm ajv 8.17.1 + ajv-formats 3.0.1 (full mode) on accept/reject string sets per JSON schema,
// and of JavaScript's RegExp (u flag, full match) per regex. The C++ tests compare the grammar
// automata with these verdicts; they never run node.
//
// Usage (network needed once, for npm; the tests themselves never use it):
//   mkdir <scratch> && cd <scratch> && npm init -y     (any folder outside the repository)
//   npm install ajv@8.17.1 ajv-formats@3.0.1
//   node <repo>/tests/text/make_grammar_oracle.js <scratch>/node_modules <repo>/tests/data/grammar/oracle.json
// and, for the end-to-end test (tests/launch/cli_structured_test.cpp), with the outputs it wrote
// (MOERT_STRUCTURED_OUTPUTS=<outputs.json> ctest -R cli_structured_test):
//   node make_grammar_oracle.js <node_modules> <oracle.json> <outputs.json> <repo>/tests/data/grammar/e2e_schemas.json \
//       <repo>/tests/data/grammar/e2e_oracle.json
// which writes {schema name: {output text: ajv's verdict}}.
//
// Output: {"schemas": [{"name", "schema", "cases": [{"text", "valid", "accept"}]}],
//          "regexes": [{"pattern", "cases": [{"text", "match"}]}]}
// `valid` is ajv's verdict on JSON.parse(text) (false when text is not JSON); `accept` marks the
// strings the grammar must generate (they are all valid: checked here).
'use strict';

const fs = require('fs');
const path = require('path');

const [nodeModules, outFile, e2eOutputs, e2eSchemas, e2eOracle] = process.argv.slice(2);
if (!nodeModules || !outFile) {
  console.error('usage: make_grammar_oracle.js <node_modules dir> <oracle.json>');
  process.exit(2);
}
const Ajv = require(path.join(nodeModules, 'ajv/dist/2020')).default;
const addFormats = require(path.join(nodeModules, 'ajv-formats')).default;

// Each: [name, schema, strings the grammar must accept, other strings (any verdict)].
const SCHEMAS = [
  ['object-required-optional',
   {type: 'object', properties: {name: {type: 'string'}, age: {type: 'integer'}, tag: {type: 'string'}},
    required: ['name', 'age'], additionalProperties: false},
   ['{"name":"a","age":3}', '{"name": "a", "age": 3, "tag": "x"}', '{ "name":"\\u00e9\\n","age":-12}'],
   ['{"age":3,"name":"a"}', '{"name":"a"}', '{"name":"a","age":3,"extra":1}', '{"name":"a","age":3.5}',
    '{"name":"a","age":3,}', '{"name":"a",,"age":3}', '{"name":1,"age":3}', '{"name":"a","age":03}',
    '{"name":"a","age":3}x', ' {"name":"a","age":3}', '{"name":"a",     "age":3}']],
  ['all-optional', {type: 'object', properties: {a: {type: 'boolean'}, b: {type: 'null'}}, additionalProperties: false},
   ['{}', '{"a":true}', '{"b":null}', '{"a":false,"b":null}'],
   ['{"b":null,"a":true}', '{,"b":null}', '{"a":true,}', '{"a":1}']],
  ['array-bounds', {type: 'array', items: {type: 'integer'}, minItems: 2, maxItems: 3},
   ['[1,2]', '[1, 2, 3]', '[ -1 ,0 ]'],
   ['[]', '[1]', '[1,2,3,4]', '[1,2,]', '[1.5,2]', '[1 2]']],
  ['array-any', {type: 'array'}, ['[]', '[1,"a",null,[true],{"x":{}}]'], ['[', '[1,]', '{}']],
  ['enum', {enum: ['red', 'green', 42, null, {a: 1}]}, ['"red"', '42', 'null', '{"a":1}'],
   ['"blue"', '"Red"', '43', '{"a":2}', '"red"x']],
  ['const', {const: 'fixed'}, ['"fixed"'], ['"fixe"', '"fixedd"', 'fixed']],
  ['anyof', {anyOf: [{type: 'string', maxLength: 2}, {type: 'integer', minimum: 10}]},
   ['"ab"', '""', '10', '999'], ['"abc"', '9', '-10', 'true']],
  ['oneof-discriminated', {oneOf: [
      {type: 'object', properties: {kind: {const: 'a'}, x: {type: 'integer'}}, required: ['kind', 'x'], additionalProperties: false},
      {type: 'object', properties: {kind: {const: 'b'}, y: {type: 'string'}}, required: ['kind', 'y'], additionalProperties: false}]},
   ['{"kind":"a","x":1}', '{"kind":"b","y":""}'], ['{"kind":"a","y":"s"}', '{"kind":"c","x":1}']],
  ['ref-recursive', {$defs: {node: {type: 'object', properties: {v: {type: 'integer'}, next: {anyOf: [{$ref: '#/$defs/node'}, {type: 'null'}]}},
                                    required: ['v', 'next'], additionalProperties: false}},
                     $ref: '#/$defs/node'},
   ['{"v":1,"next":null}', '{"v":1,"next":{"v":2,"next":{"v":3,"next":null}}}'],
   ['{"v":1}', '{"v":1,"next":{"v":2}}', '{"v":1,"next":5}']],
  ['nullable-types', {type: 'object', properties: {a: {type: ['string', 'null']}, b: {type: 'number', nullable: true}},
                      required: ['a', 'b'], additionalProperties: false},
   ['{"a":null,"b":null}', '{"a":"s","b":-1.5e3}', '{"a":"","b":0}'], ['{"a":1,"b":null}', '{"a":null,"b":"1"}']],
  ['string-lengths', {type: 'string', minLength: 2, maxLength: 4},
   ['"ab"', '"abcd"', '"\\u00e9\\n"', '"😀😀"', '"é€"'], ['"a"', '"abcde"', '""', '"\\ud83d\\ude00"']],
  ['pattern', {type: 'string', pattern: '^[A-Z]{2}-\\d{3}$'}, ['"AB-123"'], ['"AB-12"', '"ab-123"', '"AB-1234"']],
  ['pattern-escapes', {type: 'string', pattern: '^a"b\\\\c/d$'}, ['"a\\"b\\\\c/d"'], ['"a\\"b\\\\c\\/d"', '"ab"']],
  ['integer-bounds', {type: 'integer', minimum: -15, maximum: 230},
   ['-15', '-9', '0', '7', '99', '100', '199', '230'], ['-16', '231', '1000', '-0', '01', '2300']],
  ['integer-exclusive', {type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 1000},
   ['1', '999', '500'], ['0', '1000', '-1']],
  ['integer-min-only', {type: 'integer', minimum: 37}, ['37', '40', '99', '100', '123456789'], ['36', '-37', '0']],
  ['integer-max-only', {type: 'integer', maximum: -5}, ['-5', '-6', '-99', '-100', '-123456'], ['-4', '0', '5']],
  ['number', {type: 'number'}, ['0', '-0.5', '1e10', '2.5E-3', '-12'], ['01', '.5', '1.', '+1', '1e', 'NaN']],
  ['number-bounds', {type: 'number', minimum: -2, maximum: 3},
   ['-2', '-1.5', '-0.25', '0', '0.5', '2.999', '3'], ['-2.5', '-3', '3.01', '4', '-2.0001', '3.5', '1e1']],
  ['number-exclusive', {type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1},
   ['0.5', '0.001', '0.999'], ['0', '1', '-0.5', '1.5', '0.0', '1.0']],
  ['number-max-only', {type: 'number', maximum: -1}, ['-1', '-1.5', '-100.25', '-2'], ['-0.5', '0', '-0.999', '1']],
  ['boolean-null', {type: ['boolean', 'null']}, ['true', 'false', 'null'], ['True', '0', '"true"']],
  ['any', {}, ['{"a":[1,2,{"b":null}]}', '"s"', '3', 'null'], ['{', '[1,]', "'s'"]],
  ['format-date', {type: 'string', format: 'date'},
   ['"2024-02-29"', '"2000-02-29"', '"2023-12-31"', '"0000-02-29"', '"1999-04-30"'],
   ['"2023-02-29"', '"1900-02-29"', '"2023-02-30"', '"2023-04-31"', '"2023-13-01"', '"2023-00-10"', '"2023-1-01"', '"23-01-01"']],
  ['format-time', {type: 'string', format: 'time'}, ['"12:34:56Z"', '"23:59:59.123+05:30"', '"00:00:00-23:59"'],
   ['"24:00:00Z"', '"12:60:00Z"', '"12:34:56"', '"12:34Z"']],
  ['format-date-time', {type: 'string', format: 'date-time'}, ['"2024-02-29T12:00:00Z"', '"2023-01-31T23:59:59.5-01:00"'],
   ['"2023-02-29T12:00:00Z"', '"2024-01-01T12:00:00"', '"2024-01-01 12:00"']],
  ['format-email', {type: 'string', format: 'email'}, ['"a.b+c@example.com"', '"x@a-b.c.d"'],
   ['"a@b"', '"a@@b.c"', '"@b.c"', '"a@-b.c"', '"a..b@c.d"']],
  ['format-uuid', {type: 'string', format: 'uuid'}, ['"123e4567-e89b-12d3-a456-426614174000"'],
   ['"123e4567-e89b-12d3-a456-42661417400"', '"123e4567e89b12d3a456426614174000"']],
  ['format-ipv4', {type: 'string', format: 'ipv4'}, ['"192.168.0.1"', '"255.255.255.255"', '"0.0.0.0"'],
   ['"256.1.1.1"', '"1.2.3"', '"01.2.3.4"']],
  ['format-ipv6', {type: 'string', format: 'ipv6'}, ['"2001:db8:0:0:0:0:2:1"', '"fe80:0:0:0:0:0:0:1"'],
   ['"2001:db8::2:1:"', '"12345::"', '"1:2:3:4:5:6:7"']],
  ['format-uri', {type: 'string', format: 'uri'}, ['"https://example.com/a/b"', '"ftp://x.y"', '"a+b://h/p_q~r"'],
   ['"example.com"', '"/a/b"', '"http//x"']],
  ['tuple', {type: 'array', prefixItems: [{type: 'string'}, {type: 'integer'}], items: false},
   ['["a",1]'], ['["a"]', '["a",1,2]', '[1,"a"]']],
  ['additional-schema', {type: 'object', additionalProperties: {type: 'integer'}}, ['{}', '{"a":1,"b":2}'], ['{"a":"x"}']],
];

// Each: [pattern, strings that fully match, other strings].
const REGEXES = [
  ['[a-z]+@[a-z]+\\.com', ['ab@cd.com'], ['ab@cd.org', '@cd.com', 'AB@cd.com']],
  ['(ab|cd)*e?', ['', 'abcd', 'abe', 'e'], ['abc', 'ee', 'ba']],
  ['\\d{3}-\\d{2,4}', ['123-45', '123-4567'], ['12-45', '123-4', '123-45678']],
  ['[^a-c]x.', ['dxz', 'éx€'], ['axz', 'dx', 'dx\n']],
  ['\\w+\\s\\W', ['ab_1 !', 'x\t-'], ['ab  !', 'ab !!', 'é !']],
  ['(?:yes|no|maybe)', ['yes', 'no', 'maybe'], ['ye', 'yesno', '']],
  ['[\\u00e9-\\u00ff]{2}\\u{1F600}', ['éÿ😀'], ['ee😀', 'é😀']],
  ['a{2,}b{0,1}', ['aa', 'aaab'], ['a', 'abb', 'b']],
  ['\\S+\\.\\S+', ['a.b', 'x..y'], ['a .b', '.']],
  ['[-+]?[0-9]+(\\.[0-9]*)?', ['-1', '+2.', '3.14'], ['.5', '1.2.3', '--1']],
];

const ajv = new Ajv({strict: false, allErrors: false});
addFormats(ajv, {mode: 'full'});

const out = {schemas: [], regexes: []};
for (const [name, schema, accept, others] of SCHEMAS) {
  const validate = ajv.compile(schema);
  const cases = [];
  for (const [list, mustAccept] of [[accept, true], [others, false]]) {
    for (const text of list) {
      let valid = false;
      try {
        valid = validate(JSON.parse(text)) === true;
      } catch (e) {
        valid = false;
      }
      if (mustAccept && !valid) throw new Error(`${name}: ${text} is to be accepted but ajv rejects it`);
      cases.push({text, valid, accept: mustAccept});
    }
  }
  out.schemas.push({name, schema, cases});
}
for (const [pattern, matches, others] of REGEXES) {
  const re = new RegExp('^(?:' + pattern + ')$', 'u');
  const cases = [];
  for (const text of [...matches, ...others]) cases.push({text, match: re.test(text)});
  for (const text of matches) {
    if (!re.test(text)) throw new Error(`${pattern}: ${JSON.stringify(text)} is to match`);
  }
  out.regexes.push({pattern, cases});
}
fs.mkdirSync(path.dirname(outFile), {recursive: true});
fs.writeFileSync(outFile, JSON.stringify(out, null, 1) + '\n');
console.log(`wrote ${out.schemas.length} schemas, ${out.regexes.length} regexes to ${outFile}`);

if (e2eOutputs) {
  const outputs = JSON.parse(fs.readFileSync(e2eOutputs, 'utf8'));
  const schemas = JSON.parse(fs.readFileSync(e2eSchemas, 'utf8'));
  // Merged into the existing oracle: verdicts of earlier runs stay.
  const verdicts = fs.existsSync(e2eOracle) ? JSON.parse(fs.readFileSync(e2eOracle, 'utf8')) : {};
  let n = 0, invalid = 0;
  for (const {name, schema} of schemas) {
    const validate = ajv.compile(schema);
    verdicts[name] = verdicts[name] || {};
    for (const text of outputs[name] || []) {
      let valid = false;
      try {
        valid = validate(JSON.parse(text)) === true;
      } catch (e) {
        valid = false;
      }
      verdicts[name][text] = valid;
      n += 1;
      invalid += valid ? 0 : 1;
    }
  }
  fs.writeFileSync(e2eOracle, JSON.stringify(verdicts, null, 1) + '\n');
  console.log(`wrote ajv verdicts on ${n} outputs (${invalid} invalid) to ${e2eOracle}`);
}
