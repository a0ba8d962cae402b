/* bulkscan: the bulk lines of an SGLang log (Decode/Prefill batch, uvicorn access) read in one pass.
 *
 * A long-running server's log is >99% these three one-line records. This reads a chunk of bytes,
 * classifies every physical line, and for each bulk line writes the columns parsers/sglang.py would
 * give it (stamp, labels, typed tokens/ratio/count/code, its typed fields (parsers.schema.FIELDS), the
 * sorted-key JSON of the fields that have no typed slot, the text)
 * into caller-owned Arrow-layout buffers; every other line is returned as (index, start, end) for the
 * Python scanner. A line is taken only when it is provably read the same way as the Python scanner
 * reads it (printable ASCII, no glued record, a valid stamp, every field `key: value` with a value
 * class whose JSON is known); anything else is left to the scanner, so this can only be slower than
 * the scanner for a line, never different. tests/test_perf_equivalence.py and test_native_scanner.py
 * hold it to that.
 *
 * Two helpers of the timeline's sampler live here too, each with a polars twin it is tested against:
 * fx_json_int (an integer field of JSON strings) and fx_sample (which batch rows stay in memory); and one
 * of redaction's: fx_may_secret (which rows a secret prefilter could match), tested against the regexes.
 *
 * No global state (one small allocation a call): safe to call from any thread on separate buffers.
 */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FX_ABI 4
#define MAX_LINE 2000
#define MAX_FIELDS 64

enum { K_OTHER = 0, K_DECODE = 1, K_PREFILL = 2, K_ACCESS = 3 };
enum { V_BAD = 0, V_INT, V_DEC, V_PCT, V_BOOL, V_WORD };

typedef struct {
    /* in */
    const uint8_t *buf;
    int64_t n;
    const char *renames; /* "raw\0snake\0raw\0snake\0\0" */
    int64_t cap_rows, cap_attrs;
    /* bulk rows (cap_rows each; bitmaps cap_rows/8+1 bytes, zeroed by the caller) */
    int64_t *row_line;
    uint8_t *row_kind;
    int64_t *row_ts;
    int64_t *row_tokens, *row_count, *row_code;
    double *row_ratio;
    uint8_t *bm_tokens, *bm_count, *bm_code, *bm_ratio, *bm_attrs, *bm_labels;
    uint8_t *text_view; /* Arrow string views into buf, 16 bytes a row */
    int64_t *attrs_off;  /* cap_rows + 1 */
    uint8_t *attrs;      /* cap_attrs */
    uint8_t *label_view; /* views into buf */
    /* other lines (cap_rows each) */
    int64_t *other_line, *other_start, *other_end;
    /* out */
    int64_t n_rows, n_other, n_lines;
    /* in: the index of the chunk's first line (a chunk may be read in parts, one per thread) */
    int64_t line0;
    /* the typed fields (parsers.schema.FIELDS): "name\0T\0…\0" with T = i (int64), f (double), b (bool as
     * int64 0/1), s (string view into buf); per field a values buffer (8 bytes a row, 16 for s) and a
     * bitmap, NULL where this scanner does not fill the field (its values then stay in attrs) */
    const char *field_spec;
    int64_t n_fields;
    uint8_t **field_vals, **field_valid;
    uint8_t *bm_fields; /* the row has at least one typed field */
} fx_scan_t;

#ifndef FX_SOURCE_HASH
#define FX_SOURCE_HASH "unknown"
#endif

int fx_abi(void) { return FX_ABI; }
/* the hash of the source it was built from (hatch_build.py): a stale build is not used */
const char *fx_source(void) { return FX_SOURCE_HASH; }

static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static inline int is_alpha(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static inline int is_label_char(uint8_t c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.'; }
static inline void bit_set(uint8_t *bm, int64_t i) { bm[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static inline void bit_clear(uint8_t *bm, int64_t i) { bm[i >> 3] &= (uint8_t)~(1u << (i & 7)); }

/* the slot of a typed field this scanner fills (-1: none) and its type letter */
static int field_slot(const fx_scan_t *c, const char *name, int nlen, char *type) {
    const char *p = c->field_spec;
    for (int64_t i = 0; p && *p && i < c->n_fields; i++) {
        size_t l = strlen(p);
        const char *t = p + l + 1;
        if ((int)l == nlen && memcmp(p, name, l) == 0 && c->field_vals[i] && c->field_valid[i]) {
            *type = *t;
            return (int)i;
        }
        p = t + strlen(t) + 1;
    }
    return -1;
}

/* an Arrow string view of buf[at, at+len) (data buffer 0 = the chunk) */
static void view(uint8_t *v, const uint8_t *buf, int64_t at, int32_t len) {
    memset(v, 0, 16);
    memcpy(v, &len, 4);
    if (len <= 12) {
        memcpy(v + 4, buf + at, (size_t)len);
    } else {
        int32_t zero = 0, off = (int32_t)at;
        memcpy(v + 4, buf + at, 4);
        memcpy(v + 8, &zero, 4);
        memcpy(v + 12, &off, 4);
    }
}

static int digits(const uint8_t *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!is_digit(s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil) */
static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "[YYYY-MM-DD HH:MM:SS(.ffffff)?( Label){0,8}] " at s; returns the offset after it, or -1.
 * The date must be one datetime.fromisoformat accepts. */
static int prefix(const uint8_t *s, int len, int64_t *ts, int *lab_a, int *lab_b) {
    if (len < 22 || s[0] != '[') return -1;
    const uint8_t *p = s + 1;
    if (p[4] != '-' || p[7] != '-' || p[10] != ' ' || p[13] != ':' || p[16] != ':') return -1;
    int y = digits(p, 4), mo = digits(p + 5, 2), d = digits(p + 8, 2);
    int h = digits(p + 11, 2), mi = digits(p + 14, 2), se = digits(p + 17, 2);
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59) return -1;
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int dim = mdays[mo - 1] + (mo == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
    if (d > dim) return -1;
    int i = 20;
    int64_t us = 0;
    if (i < len && (s[i] == '.' || s[i] == ',')) {
        int j = i + 1, nd = 0;
        while (j < len && is_digit(s[j]) && nd < 7) { j++; nd++; }
        if (nd < 1 || nd > 6) return -1;
        for (int k = 0; k < 6; k++) us = us * 10 + (k < nd ? s[i + 1 + k] - '0' : 0);
        i = j;
    }
    *ts = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60 * 1000000LL + (int64_t)se * 1000000LL + us;
    int la = i, nl = 0;
    while (i + 1 < len && s[i] == ' ' && is_alpha(s[i + 1])) {
        if (++nl > 8) return -1;
        i += 2;
        while (i < len && is_label_char(s[i])) i++;
    }
    if (i + 1 >= len || s[i] != ']' || s[i + 1] != ' ') return -1;
    *lab_a = nl ? la + 1 : -1; /* labels stripped of the leading space */
    *lab_b = i;
    return i + 2;
}

/* snake_case of a raw batch key, as parsers.sglang._snake; out needs 5*klen+8 bytes */
static int snake(const uint8_t *k, int klen, char *out, const char *renames) {
    for (const char *r = renames; r && *r;) {
        size_t rl = strlen(r);
        const char *to = r + rl + 1;
        size_t tl = strlen(to);
        if ((int)rl == klen && memcmp(r, k, rl) == 0) {
            memcpy(out, to, tl);
            return (int)tl;
        }
        r = to + tl + 1;
    }
    char tmp[5 * MAX_LINE + 8];
    int t = 0;
    for (int i = 0; i < klen;) {
        if (i + 8 <= klen) {
            static const char tf[] = "tflops/s";
            int hit = 1;
            for (int j = 0; j < 8; j++) {
                uint8_t c = k[i + j];
                if (c >= 'A' && c <= 'Z') c += 32;
                if (c != (uint8_t)tf[j]) { hit = 0; break; }
            }
            if (hit) { memcpy(tmp + t, "tflops", 6); t += 6; i += 8; continue; }
        }
        uint8_t c = k[i++];
        if (c == '/') { memcpy(tmp + t, "_per_", 5); t += 5; continue; }
        if (c >= 'A' && c <= 'Z') c += 32;
        tmp[t++] = (char)c;
    }
    int o = 0, sep = 0;
    for (int i = 0; i < t; i++) {
        uint8_t c = (uint8_t)tmp[i];
        if ((c >= 'a' && c <= 'z') || is_digit(c)) {
            if (sep && o) out[o++] = '_';
            sep = 0;
            out[o++] = (char)c;
        } else {
            sep = 1;
        }
    }
    if (!o) { memcpy(out, "field", 5); o = 5; }
    return o;
}

/* repr(float) of sign+ip.fp when provable (≤15 digits, not below 1e-4); returns length or -1 */
static int canon_decimal(int neg, const uint8_t *ip, int ni, const uint8_t *fp, int nf, char *out) {
    while (ni && *ip == '0') { ip++; ni--; }
    while (nf && fp[nf - 1] == '0') nf--;
    if (ni + nf > 15) return -1;
    if (!ni && nf >= 4 && fp[0] == '0' && fp[1] == '0' && fp[2] == '0' && fp[3] == '0') return -1;
    int o = 0;
    if (neg) out[o++] = '-';
    if (ni) { memcpy(out + o, ip, ni); o += ni; } else out[o++] = '0';
    out[o++] = '.';
    if (nf) { memcpy(out + o, fp, nf); o += nf; } else out[o++] = '0';
    return o;
}

typedef struct {
    int cls;
    int64_t i;
    const char *num; /* V_DEC, V_PCT: the decimal text whose float is the value (parsed on demand) */
    int numlen;
} value_t;

static double as_double(const value_t *v) {
    if (v->cls == V_INT) return (double)v->i;
    /* Clinger's fast path: ≤15 significant digits and ≤22 decimals make m / 10^k one correctly rounded
     * division of two exact doubles, i.e. what strtod (and Python's float()) returns */
    static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *q = v->num, *e = v->num + v->numlen;
    int neg = q < e && *q == '-';
    q += neg;
    uint64_t m = 0;
    int sig = 0, frac = -1;
    for (; q < e; q++) {
        if (*q == '.') { frac = 0; continue; }
        if (*q < '0' || *q > '9') { sig = 99; break; }
        if (m || *q != '0') sig++;
        m = m * 10 + (uint64_t)(*q - '0');
        if (frac >= 0) frac++;
        if (sig > 15) break;
    }
    if (sig <= 15 && frac >= 0 && frac <= 22) {
        double d = (double)m / p10[frac];
        return neg ? -d : d;
    }
    char tmp[64];
    memcpy(tmp, v->num, (size_t)v->numlen);
    tmp[v->numlen] = 0;
    return strtod(tmp, NULL);
}

/* the class, JSON text and typed value of one raw value, as parsers.sglang._value; V_BAD: leave the
 * line to the scanner */
static int value(const uint8_t *v, int n, char *out, value_t *val) {
    if (n < 0 || n > MAX_LINE) return -1;
    while (n && *v == ' ') { v++; n--; }
    while (n && v[n - 1] == ' ') n--;
    val->cls = V_BAD;
    if (n == 0) { out[0] = '"'; out[1] = '"'; val->cls = V_WORD; return 2; }
    int neg = v[0] == '-';
    int a = neg, j = a;
    while (j < n && is_digit(v[j])) j++;
    int ni = j - a;
    if (j == n && ni >= 1 && ni <= 15) { /* int */
        int64_t x = 0;
        for (int k = a; k < n; k++) x = x * 10 + (v[k] - '0');
        if (neg) x = -x;
        val->cls = V_INT;
        val->i = x;
        if ((v[a] != '0' || ni == 1) && !(neg && x == 0)) { /* already canonical: as printed */
            memcpy(out, v, (size_t)n);
            return n;
        }
        char tmp[24];
        int t = 0;
        uint64_t ux = x < 0 ? (uint64_t)(-x) : (uint64_t)x;
        do { tmp[t++] = (char)('0' + ux % 10); ux /= 10; } while (ux);
        int o = 0;
        if (x < 0) out[o++] = '-';
        while (t) out[o++] = tmp[--t];
        return o;
    }
    if (ni >= 1 && j < n && v[j] == '.') { /* plain decimal */
        int fs = j + 1, k = fs;
        while (k < n && is_digit(v[k])) k++;
        if (k == n && k > fs) {
            int o = canon_decimal(neg, v + a, ni, v + fs, k - fs, out);
            if (o < 0 || n >= 64) return -1;
            val->cls = V_DEC;
            val->num = (const char *)v;
            val->numlen = n;
            return o;
        }
    }
    if (!neg && ni >= 1 && ni <= 6) { /* percent: N% or N.M% -> 0..1 */
        int fs = -1, k = j;
        if (k < n && v[k] == '.') {
            fs = ++k;
            while (k < n && is_digit(v[k])) k++;
            if (k == fs) k = -1;
        }
        if (k == n - 1 && v[k] == '%') {
            int nf = fs < 0 ? 0 : k - fs;
            char pip[8];
            int z = ni < 3 ? 3 - ni : 0;
            memset(pip, '0', z);
            memcpy(pip + z, v, ni);
            int np = ni + z;
            uint8_t pfrac[MAX_LINE + 4];
            pfrac[0] = (uint8_t)pip[np - 2];
            pfrac[1] = (uint8_t)pip[np - 1];
            if (nf) memcpy(pfrac + 2, v + fs, nf);
            int nfs = nf;
            while (nfs && v[fs + nfs - 1] == '0') nfs--;
            if (nfs > 4) return -1;
            int o = canon_decimal(0, (const uint8_t *)pip, np - 2, pfrac, nf + 2, out);
            if (o < 0) return -1;
            int pi = 0;
            while (pi < np - 2 && pip[pi] == '0') pi++;
            int pfn = nf + 2;
            while (pfn && pfrac[pfn - 1] == '0') pfn--;
            if (pi == np - 2 && pfn > 6) return -1;
            if (o >= 64) return -1;
            val->cls = V_PCT;
            val->num = out;
            val->numlen = o;
            return o;
        }
    }
    if (n == 4 && memcmp(v, "True", 4) == 0) { memcpy(out, "true", 4); val->cls = V_BOOL; return 4; }
    if (n == 5 && memcmp(v, "False", 5) == 0) { memcpy(out, "false", 5); val->cls = V_BOOL; return 5; }
    if (is_alpha(v[0])) {
        for (int k = 0; k < n; k++)
            if (v[k] == '"' || v[k] == '\\') return -1;
        out[0] = '"';
        memcpy(out + 1, v, (size_t)n);
        out[n + 1] = '"';
        val->cls = V_WORD;
        return n + 2;
    }
    return -1;
}

/* A batch line's shape: its kind, whether it has an iteration number, and its raw keys in order. Lines
 * of one shape give the same snake keys in the same sorted order, so that work is done once a shape. */
#define SHAPES 8
#define SHAPE_KEYS 1024
typedef struct {
    int kind, has_iter, nr, rk_total;
    int rk_len[MAX_FIELDS];
    uint8_t rk[SHAPE_KEYS];
    int nout;
    int out_src[MAX_FIELDS + 1]; /* raw field index, or -1 for the iteration number */
    int out_klen[MAX_FIELDS + 1], out_koff[MAX_FIELDS + 1];
    char keys[6 * SHAPE_KEYS + 32];
    int tok, rat, cnt; /* raw field index of the typed columns, or -1 */
    int slot[MAX_FIELDS + 1]; /* per output key: its typed field's slot, or -1 (JSON) */
    char stype[MAX_FIELDS + 1];
} shape_t;

typedef struct {
    int n;
    shape_t s[SHAPES];
    shape_t *last[3]; /* the shape of the last line of each kind: the next one is likely the same */
} shapes_t;

typedef struct { int ka, kb, va, vb; } span_t;

/* snake keys, last-one-wins dedup (a dict), sorted as json.dumps(sort_keys=True); 0 if it does not fit */
static int build_shape(const fx_scan_t *c, shape_t *sh, const uint8_t *s, const span_t *f, int nr, int has_iter,
                       int kind, const char *renames) {
    sh->kind = kind;
    sh->has_iter = has_iter;
    sh->nr = nr;
    int t = 0;
    for (int q = 0; q < nr; q++) {
        int kl = f[q].kb - f[q].ka;
        if (t + kl > SHAPE_KEYS) return 0;
        memcpy(sh->rk + t, s + f[q].ka, (size_t)kl);
        sh->rk_len[q] = kl;
        t += kl;
    }
    sh->rk_total = t;
    /* candidate entries: iteration first, then each raw field; a later equal key replaces the source */
    int ne = 0, kp = 0;
    if (has_iter) {
        memcpy(sh->keys, "iteration", 10);
        sh->out_koff[0] = 0;
        sh->out_klen[0] = 9;
        sh->out_src[0] = -1;
        kp = 10;
        ne = 1;
    }
    for (int q = 0; q < nr; q++) {
        char *key = sh->keys + kp;
        int kl = snake(s + f[q].ka, f[q].kb - f[q].ka, key, renames);
        key[kl] = 0;
        int found = -1;
        for (int e = 0; e < ne; e++)
            if (sh->out_klen[e] == kl && memcmp(sh->keys + sh->out_koff[e], key, (size_t)kl) == 0) { found = e; break; }
        if (found >= 0) {
            sh->out_src[found] = q;
            continue;
        }
        sh->out_koff[ne] = kp;
        sh->out_klen[ne] = kl;
        sh->out_src[ne] = q;
        ne++;
        kp += kl + 1;
    }
    for (int x = 1; x < ne; x++) { /* insertion sort by key */
        int ko = sh->out_koff[x], kl = sh->out_klen[x], src = sh->out_src[x];
        int y = x - 1;
        while (y >= 0 && strcmp(sh->keys + sh->out_koff[y], sh->keys + ko) > 0) {
            sh->out_koff[y + 1] = sh->out_koff[y];
            sh->out_klen[y + 1] = sh->out_klen[y];
            sh->out_src[y + 1] = sh->out_src[y];
            y--;
        }
        sh->out_koff[y + 1] = ko;
        sh->out_klen[y + 1] = kl;
        sh->out_src[y + 1] = src;
    }
    sh->nout = ne;
    int tok = -1, tok2 = -1, rat = -1, rat2 = -1, cnt = -1;
    const char *tk = kind == K_PREFILL ? "new_token" : "token";
    for (int e = 0; e < ne; e++) {
        const char *k = sh->keys + sh->out_koff[e];
        if (strcmp(k, tk) == 0) tok = sh->out_src[e];
        else if (strcmp(k, "full_token") == 0) tok2 = sh->out_src[e];
        else if (strcmp(k, "token_usage") == 0) rat = sh->out_src[e];
        else if (strcmp(k, "full_token_usage") == 0) rat2 = sh->out_src[e];
        else if (strcmp(k, "running_req") == 0) cnt = sh->out_src[e];
    }
    for (int e = 0; e < ne; e++)
        sh->slot[e] = field_slot(c, sh->keys + sh->out_koff[e], sh->out_klen[e], &sh->stype[e]);
    sh->tok = tok >= 0 ? tok : tok2;
    sh->rat = rat >= 0 ? rat : rat2;
    sh->cnt = cnt;
    return 1;
}

static shape_t *find_shape(shapes_t *ss, const uint8_t *s, const span_t *f, int nr, int has_iter, int kind) {
    for (int x = 0; x < ss->n; x++) {
        shape_t *sh = &ss->s[x];
        if (sh->nr != nr || sh->has_iter != has_iter || sh->kind != kind) continue;
        int t = 0, ok = 1;
        for (int q = 0; q < nr && ok; q++) {
            int kl = f[q].kb - f[q].ka;
            ok = sh->rk_len[q] == kl && memcmp(sh->rk + t, s + f[q].ka, (size_t)kl) == 0;
            t += kl;
        }
        if (ok) return sh;
    }
    return NULL;
}

/* Decode/Prefill batch body after "Decode batch"/"Prefill batch"; 0 = leave to the scanner */
static int batch(fx_scan_t *c, shapes_t *ss, int64_t r, const uint8_t *s, int at, int len, int kind) {
    span_t f[MAX_FIELDS];
    int nr = 0, has_iter = 0;
    int64_t iter = 0;
    int i = at;
    if (i < len && s[i] == '(') return 0; /* (mixed …) */
    if (i + 1 < len && s[i] == ' ' && s[i + 1] == '[') {
        int j = i + 2;
        while (j < len && is_digit(s[j])) j++;
        int nd = j - (i + 2);
        if (nd < 1 || nd > 18 || j >= len || s[j] != ']') return 0;
        for (int k = i + 2; k < j; k++) iter = iter * 10 + (s[k] - '0');
        has_iter = 1;
        i = j + 1;
    }
    if (i < len && (s[i] == '.' || s[i] == ',' || s[i] == ':')) i++;
    if (i < len && s[i] == ' ') i++;
    /* the fields as the last line of this kind had them: the same spans the loop below finds (a shape's
     * keys hold no ':' or ',', so the loop would stop at the same ':'), found by memcmp */
    shape_t *sh = ss->last[kind];
    if (sh && sh->has_iter == has_iter && sh->nr > 0) {
        int ii = i, t = 0, q = 0;
        for (; q < sh->nr; q++) {
            if (ii < len && s[ii] == ' ') ii++;
            int kl = sh->rk_len[q];
            if (ii + kl + 1 >= len || s[ii + kl] != ':' || s[ii + kl + 1] != ' ' ||
                memcmp(s + ii, sh->rk + t, (size_t)kl) != 0)
                break;
            t += kl;
            int vb = ii + kl + 2;
            while (vb < len && s[vb] != ',') vb++;
            f[q].ka = ii;
            f[q].kb = ii + kl;
            f[q].va = ii + kl + 2;
            f[q].vb = vb;
            int done = vb == len || vb + 1 == len || (vb + 2 == len && s[vb + 1] == ' ');
            if (done != (q == sh->nr - 1)) break;
            ii = vb + 1;
        }
        if (q == sh->nr) {
            nr = sh->nr;
            goto values;
        }
    }
    sh = NULL;
    while (i < len) {
        if (s[i] == ' ') i++;
        int ka = i;
        while (i < len && s[i] != ':' && s[i] != ',') i++;
        if (i == ka || i + 1 >= len || s[i] != ':' || s[i + 1] != ' ') return 0;
        if (nr == MAX_FIELDS) return 0;
        int vb = i + 2;
        while (vb < len && s[vb] != ',') vb++;
        f[nr].ka = ka;
        f[nr].kb = i;
        f[nr].va = i + 2;
        f[nr].vb = vb;
        nr++;
        if (vb == len) break;
        i = vb + 1;
        if (i == len || (i == len - 1 && s[i] == ' ')) break;
    }
    shape_t local;
    sh = find_shape(ss, s, f, nr, has_iter, kind);
    if (!sh) {
        sh = ss->n < SHAPES ? &ss->s[ss->n] : &local;
        if (!build_shape(c, sh, s, f, nr, has_iter, kind, c->renames)) return 0;
        if (sh != &local) ss->n++;
    }
    ss->last[kind] = sh != &local ? sh : NULL;
values:;
    /* every value must be of a known class, overridden duplicates too (as the polars path demands) */
    char js[2 * MAX_LINE + 64];
    int joff[MAX_FIELDS], jlen[MAX_FIELDS];
    value_t v[MAX_FIELDS];
    int jp = 0;
    for (int q = 0; q < nr; q++) {
        int jl = value(s + f[q].va, f[q].vb - f[q].va, js + jp, &v[q]);
        if (jl < 0) return 0;
        joff[q] = jp;
        jlen[q] = jl;
        jp += jl;
    }
    /* typed columns; a boolean where a count belongs is left to the scanner (bool is an int there) */
    if ((sh->tok >= 0 && v[sh->tok].cls == V_BOOL) || (sh->cnt >= 0 && v[sh->cnt].cls == V_BOOL)) return 0;
    if (sh->tok >= 0 && v[sh->tok].cls == V_INT) { c->row_tokens[r] = v[sh->tok].i; bit_set(c->bm_tokens, r); }
    if (sh->cnt >= 0 && v[sh->cnt].cls == V_INT) { c->row_count[r] = v[sh->cnt].i; bit_set(c->bm_count, r); }
    if (sh->rat >= 0) {
        int cl = v[sh->rat].cls;
        if (cl == V_INT || cl == V_DEC || cl == V_PCT) {
            /* a V_PCT's text lives in js: point it there */
            if (cl == V_PCT) v[sh->rat].num = js + joff[sh->rat];
            c->row_ratio[r] = as_double(&v[sh->rat]);
            bit_set(c->bm_ratio, r);
        }
    }
    int64_t w = c->attrs_off[r];
    if (sh->nout) {
        char itxt[24];
        int il = 0;
        if (has_iter) {
            char tmp[24];
            int t = 0;
            uint64_t ux = (uint64_t)iter;
            do { tmp[t++] = (char)('0' + ux % 10); ux /= 10; } while (ux);
            while (t) itxt[il++] = tmp[--t];
        }
        int64_t need = 2 + jp + il;
        for (int e = 0; e < sh->nout; e++) need += sh->out_klen[e] + 6;
        if (w + need > c->cap_attrs) return -1;
        /* a value of its typed field's type goes to that field; the rest to the JSON */
        int json_keys = 0;
        uint8_t typed[MAX_FIELDS + 1];
        for (int e = 0; e < sh->nout; e++) {
            int src = sh->out_src[e], sl = sh->slot[e];
            int cls = src < 0 ? V_INT : v[src].cls;
            char ty = sl >= 0 ? sh->stype[e] : 0;
            typed[e] = (ty == 'i' && cls == V_INT) || (ty == 'f' && (cls == V_DEC || cls == V_PCT)) ||
                       (ty == 'b' && cls == V_BOOL);
            if (!typed[e]) { json_keys++; continue; }
            uint8_t *slot = c->field_vals[sl] + 8 * r;
            if (ty == 'i') {
                int64_t x = src < 0 ? iter : v[src].i;
                memcpy(slot, &x, 8);
            } else if (ty == 'f') {
                if (cls == V_PCT) v[src].num = js + joff[src];
                double d = as_double(&v[src]);
                memcpy(slot, &d, 8);
            } else {
                int64_t x = js[joff[src]] == 't';
                memcpy(slot, &x, 8);
            }
            bit_set(c->field_valid[sl], r);
            bit_set(c->bm_fields, r);
        }
        if (!json_keys) {
            c->attrs_off[r + 1] = w;
            return kind;
        }
        uint8_t *o = c->attrs + w;
        *o++ = '{';
        int first = 1;
        for (int e = 0; e < sh->nout; e++) {
            if (typed[e]) continue;
            if (!first) { *o++ = ','; *o++ = ' '; }
            first = 0;
            *o++ = '"';
            memcpy(o, sh->keys + sh->out_koff[e], (size_t)sh->out_klen[e]);
            o += sh->out_klen[e];
            *o++ = '"'; *o++ = ':'; *o++ = ' ';
            int src = sh->out_src[e];
            if (src < 0) {
                memcpy(o, itxt, (size_t)il);
                o += il;
            } else {
                memcpy(o, js + joff[src], (size_t)jlen[src]);
                o += jlen[src];
            }
        }
        *o++ = '}';
        w = o - c->attrs;
        bit_set(c->bm_attrs, r);
    }
    c->attrs_off[r + 1] = w;
    return kind;
}

static const char *LEVELS[] = {"INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL", "TRACE"};

/* uvicorn access line after the prefix: LEVEL: +CLIENT - "METHOD PATH( PROTO)?" NNN… */
static const char *const ACCESS_FIELDS[4] = {"client", "level", "method", "path"};

static int access(fx_scan_t *c, const int *acc_slot, int64_t r, const uint8_t *s, int at, int len) {
    int i = at, lv = -1;
    for (int q = 0; q < 6; q++) {
        int n = (int)strlen(LEVELS[q]);
        if (at + n < len && memcmp(s + at, LEVELS[q], n) == 0 && s[at + n] == ':') { lv = q; i = at + n + 1; break; }
    }
    if (lv < 0 || i >= len || s[i] != ' ') return 0;
    while (i < len && s[i] == ' ') i++;
    int ca = i;
    while (i < len && s[i] != ' ' && s[i] != '"' && s[i] != '\\') i++;
    int cb = i;
    if (cb == ca || i + 4 > len || memcmp(s + i, " - \"", 4) != 0) return 0;
    i += 4;
    int ma = i;
    while (i < len && s[i] >= 'A' && s[i] <= 'Z') i++;
    int mb = i;
    if (mb == ma || i >= len || s[i] != ' ') return 0;
    i++;
    int pa = i;
    while (i < len && s[i] != ' ' && s[i] != '"' && s[i] != '\\') i++;
    int pb = i;
    if (i < len && s[i] == ' ')
        while (i < len && s[i] != '"') i++;
    if (i >= len || s[i] != '"') return 0;
    i++;
    if (i + 4 > len || s[i] != ' ' || !is_digit(s[i + 1]) || !is_digit(s[i + 2]) || !is_digit(s[i + 3])) return 0;
    int code = (s[i + 1] - '0') * 100 + (s[i + 2] - '0') * 10 + (s[i + 3] - '0');
    for (int k = i + 4; k < len; k++)
        if (s[k] == '"') return 0;
    int64_t w = c->attrs_off[r];
    int64_t need = 64 + (cb - ca) + (mb - ma) + (pb - pa) + 8;
    if (w + need > c->cap_attrs) return -1;
    /* in key order, as the JSON is: each to its typed field (a view into the line) where it has one */
    const char *const *names = ACCESS_FIELDS;
    int spans[4][2] = {{ca, cb}, {at, at + (int)strlen(LEVELS[lv])}, {ma, mb}, {pa, pb}};
    int64_t at0 = s - c->buf;
    uint8_t *o = c->attrs + w;
    int json_keys = 0;
    for (int q = 0; q < 4; q++) {
        int sl = acc_slot[q];
        if (sl >= 0) {
            view(c->field_vals[sl] + 16 * r, c->buf, at0 + spans[q][0], spans[q][1] - spans[q][0]);
            bit_set(c->field_valid[sl], r);
            bit_set(c->bm_fields, r);
            continue;
        }
        *o++ = json_keys ? ',' : '{';
        if (json_keys) *o++ = ' ';
        json_keys++;
        *o++ = '"';
        memcpy(o, names[q], strlen(names[q]));
        o += strlen(names[q]);
        memcpy(o, "\": \"", 4);
        o += 4;
        memcpy(o, s + spans[q][0], (size_t)(spans[q][1] - spans[q][0]));
        o += spans[q][1] - spans[q][0];
        *o++ = '"';
    }
    if (json_keys) {
        *o++ = '}';
        bit_set(c->bm_attrs, r);
    }
    c->attrs_off[r + 1] = o - c->attrs;
    c->row_code[r] = code;
    bit_set(c->bm_code, r);
    return K_ACCESS;
}

/* one physical line (without \n; a final \r excluded): its kind, with row r filled, or 0 */
static int line(fx_scan_t *c, shapes_t *ss, const int *acc_slot, int64_t r, const uint8_t *s, int64_t len64) {
    if (len64 < 22 || len64 > MAX_LINE || s[0] != '[' || !is_digit(s[1])) return 0;
    int len = (int)len64;
    /* printable ASCII only, and no record glued after this one ("[20…", the scanner splits it); eight
     * bytes at a time, a word with a suspect byte checked byte by byte */
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    int i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        uint64_t lo = (x - ones * 0x20) & ~x;             /* a byte < 0x20 (or >= 0x80) */
        uint64_t hi = (x + ones * (127 - 0x7e)) | x;       /* a byte > 0x7e */
        uint64_t br = x ^ (ones * '[');
        br = (br - ones) & ~br;                            /* a '[' */
        if (((lo | hi | br) & highs) == 0) continue;
        for (int j = i; j < i + 8; j++) {
            uint8_t ch = s[j];
            if (ch < 0x20 || ch > 0x7e) return 0;
            if (ch == '[' && j && j + 2 < len && s[j + 1] == '2' && s[j + 2] == '0') return 0;
        }
    }
    for (; i < len; i++) {
        uint8_t ch = s[i];
        if (ch < 0x20 || ch > 0x7e) return 0;
        if (ch == '[' && i && i + 2 < len && s[i + 1] == '2' && s[i + 2] == '0') return 0;
    }
    int64_t ts;
    int la, lb;
    int at = prefix(s, len, &ts, &la, &lb);
    if (at < 0) return 0;
    int kind = 0;
    c->attrs_off[r + 1] = c->attrs_off[r];
    if (len - at >= 12 && memcmp(s + at, "Decode batch", 12) == 0)
        kind = batch(c, ss, r, s, at + 12, len, K_DECODE);
    else if (len - at >= 13 && memcmp(s + at, "Prefill batch", 13) == 0)
        kind = batch(c, ss, r, s, at + 13, len, K_PREFILL);
    else
        kind = access(c, acc_slot, r, s, at, len);
    if (kind <= 0) {
        /* undo what a failed row wrote */
        int64_t byte = r >> 3;
        uint8_t keep = (uint8_t)((1u << (r & 7)) - 1);
        c->bm_tokens[byte] &= keep; c->bm_count[byte] &= keep; c->bm_code[byte] &= keep;
        c->bm_ratio[byte] &= keep; c->bm_attrs[byte] &= keep;
        if (c->bm_fields) c->bm_fields[byte] &= keep;
        for (int64_t q = 0; q < c->n_fields; q++)
            if (c->field_valid[q]) bit_clear(c->field_valid[q], r);
        c->attrs_off[r + 1] = c->attrs_off[r];
        return kind;
    }
    c->row_ts[r] = ts;
    int64_t at0 = s - c->buf;
    if (la >= 0) {
        view(c->label_view + 16 * r, c->buf, at0 + la, lb - la);
        bit_set(c->bm_labels, r);
    } else {
        memset(c->label_view + 16 * r, 0, 16);
    }
    view(c->text_view + 16 * r, c->buf, at0, len);
    c->row_kind[r] = (uint8_t)kind;
    return kind;
}

/* Returns 0, or -1 when the attrs buffer is too small (call again with a bigger one). */
int fx_scan(fx_scan_t *c) {
    const uint8_t *b = c->buf;
    int64_t n = c->n, pos = 0, li = 0, r = 0, o = 0;
    shapes_t *ss = malloc(sizeof(shapes_t));
    if (!ss) return -4;
    ss->n = 0;
    ss->last[0] = ss->last[1] = ss->last[2] = NULL;
    c->attrs_off[0] = 0;
    if (n > 0x7fffffff) { free(ss); return -3; } /* views hold 32-bit offsets */
    int acc_slot[4];
    for (int q = 0; q < 4; q++) {
        char ty = 0;
        acc_slot[q] = field_slot(c, ACCESS_FIELDS[q], (int)strlen(ACCESS_FIELDS[q]), &ty);
        if (ty != 's') acc_slot[q] = -1;
    }
    while (pos < n) {
        const uint8_t *nl = memchr(b + pos, '\n', n - pos);
        int64_t end = nl ? nl - b : n;
        int64_t len = end - pos;
        int64_t body = (len && b[end - 1] == '\r') ? len - 1 : len;
        int k = 0;
        if (r < c->cap_rows) k = line(c, ss, acc_slot, r, b + pos, body);
        if (k < 0) { free(ss); return -1; }
        if (k > 0) {
            c->row_line[r] = c->line0 + li;
            r++;
        } else {
            if (o >= c->cap_rows) { free(ss); return -2; }
            c->other_line[o] = c->line0 + li;
            c->other_start[o] = pos;
            c->other_end[o] = end;
            o++;
        }
        li++;
        pos = end + 1;
    }
    free(ss);
    c->n_rows = r;
    c->n_other = o;
    c->n_lines = li;
    return 0;
}

/* The integer value of a key in each string of an Arrow large_string array of JSON objects (the
 * sampler's queue_req): per row, the first `"key": ` followed by -?[0-9]{1,15} and ',' or '}' (what
 * re.search(r'"key": (-?[0-9]{1,15})[,}]') finds), else null. `needle` is the literal `"key": `. */
void fx_json_int(const int64_t *offsets, const uint8_t *data, const uint8_t *valid, int64_t first, int64_t n,
                 const char *needle, int64_t nlen, int64_t *out, uint8_t *out_valid) {
    for (int64_t r = 0; r < n; r++) {
        int64_t k = first + r;
        if (valid && !(valid[k >> 3] & (1u << (k & 7)))) continue;
        const uint8_t *s = data + offsets[k], *e = data + offsets[k + 1];
        while (s < e) {
            const uint8_t *hit = memmem(s, (size_t)(e - s), needle, (size_t)nlen);
            if (!hit) break;
            const uint8_t *p = hit + nlen;
            int neg = p < e && *p == '-';
            const uint8_t *d = p + neg, *q = d;
            int64_t x = 0;
            while (q < e && q - d < 16 && *q >= '0' && *q <= '9') x = x * 10 + (*q++ - '0');
            int nd = (int)(q - d);
            if (nd >= 1 && nd <= 15 && q < e && (*q == ',' || *q == '}')) {
                out[r] = neg ? -x : x;
                bit_set(out_valid, r);
                break;
            }
            s = hit + 1;
        }
    }
}

/* The sampler's choice for one chunk of batch/access rows (forensics.timeline._Sampler, which holds the
 * same rule in polars): per key (kind, rank, run; ids 1..nkeys) rows are numbered on from ord0[key];
 * a row is kept when its number is below keep_all, when it is at or above extreme_ratio token usage
 * (not an access line) and among the first max_extreme such rows of the file (running count from
 * *extreme), or when it is, in its bucket of `bucket` consecutive numbers of its key within this chunk,
 * the first or last row or the first row with the largest ratio, smallest ratio, largest tokens,
 * count or queue. counts[key] gets the rows of each key. */
typedef struct { int64_t b, first, last, rmax, rmin, tmax, cmax, qmax; } fx_group_t;

static void fx_flush(const fx_group_t *g, uint8_t *keep) {
    const int64_t ids[7] = {g->first, g->last, g->rmax, g->rmin, g->tmax, g->cmax, g->qmax};
    for (int i = 0; i < 7; i++)
        if (ids[i] >= 0) keep[ids[i]] = 1;
}

int fx_sample(int64_t n, const int64_t *key, int64_t nkeys, const int64_t *ord0, int64_t bucket, int64_t keep_all,
              const double *ratio, const uint8_t *ratio_v, const int64_t *tokens, const uint8_t *tokens_v,
              const int64_t *count, const uint8_t *count_v, const int64_t *queue, const uint8_t *queue_v,
              const uint8_t *is_access, double extreme_ratio, int64_t max_extreme, int64_t *extreme,
              uint8_t *keep, int64_t *counts) {
#define VALID(bm, i) (!(bm) || ((bm)[(i) >> 3] >> ((i) & 7) & 1))
    fx_group_t *g = malloc(sizeof(fx_group_t) * (size_t)(nkeys + 1));
    if (!g || bucket < 1) { free(g); return -1; }
    for (int64_t k = 0; k <= nkeys; k++) { g[k].b = -1; counts[k] = 0; }
    int64_t xn = *extreme;
    for (int64_t r = 0; r < n; r++) {
        int64_t k = key[r];
        if (k < 1 || k > nkeys) { free(g); return -2; }
        int64_t o = ord0[k] + counts[k]++;
        int64_t b = o / bucket;
        fx_group_t *s = &g[k];
        if (s->b != b) {
            if (s->b >= 0) fx_flush(s, keep);
            s->b = b;
            s->first = r;
            s->rmax = s->rmin = s->tmax = s->cmax = s->qmax = -1;
        }
        s->last = r;
        int rv = VALID(ratio_v, r);
        if (rv) {
            if (s->rmax < 0 || ratio[r] > ratio[s->rmax]) s->rmax = r;
            if (s->rmin < 0 || ratio[r] < ratio[s->rmin]) s->rmin = r;
        }
        if (VALID(tokens_v, r) && (s->tmax < 0 || tokens[r] > tokens[s->tmax])) s->tmax = r;
        if (VALID(count_v, r) && (s->cmax < 0 || count[r] > count[s->cmax])) s->cmax = r;
        if (VALID(queue_v, r) && (s->qmax < 0 || queue[r] > queue[s->qmax])) s->qmax = r;
        if (o < keep_all) keep[r] = 1;
        if (rv && !is_access[r] && ratio[r] >= extreme_ratio) {
            xn++;
            if (xn <= max_extreme) keep[r] = 1;
        }
    }
    for (int64_t k = 1; k <= nkeys; k++)
        if (g[k].b >= 0) fx_flush(&g[k], keep);
    *extreme = xn;
    free(g);
    return 0;
#undef VALID
}

/* Which strings of an Arrow large_string array may hold a secret (forensics.redact.redact_frame): a
 * row is flagged (out[r] = 1) unless it provably matches none of redact's row prefilters
 * (JOINED_PREFILTER, their case-folded union), so a row left at 0 can skip them. Flagged: any byte
 * >= 0x80 (the prefilters fold case the Unicode way: 'ſk-' matches 'sk-'), any of = @ ' " \n \0 _
 * (every alternative without a literal below holds one), or, ASCII case folded, one of the literals of
 * SECRET_ANCHORS, "-token" only before what the prefilters allow after it (token_next): a prefill
 * line's "#new-token:" is no candidate. Nulls stay 0. tests/test_redact.py holds this to the regexes.
 *
 * A row is first read 16 bytes at a time (GCC/Clang vector extensions: SSE2 or NEON, no branch per
 * byte, which is what a branch on every 'a', 's' or '-' of a log line costs otherwise): any special byte,
 * or, for each anchor, a pair of its bytes that every occurrence holds and log lines rarely do (its
 * `pair`: the offset of that pair; "-token" by "-t", its 'n' and the byte after it), sends the row to the exact
 * test, may_secret_row. */
static const struct { const char *lit; int pair; } SECRET_ANCHORS[] = {
    {"sk-", 1}, {"akia", 1}, {"asia", 1}, {"bearer", 0}, {"api", 1}, {"secret", 2}, {"passw", 3}, {"x-", 0},
    {"authorization", 7}, {"auth-token", 3}, {"access-token", 1}, {"-token", 0}, {NULL, 0}};

/* after "-token": PLAIN's [ \t], FULL's [=\s\x00"',] (\s: ASCII whitespace, 0x1c-0x1f too to be safe) */
static int token_next(uint8_t c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == '=' || c == 0 || c == '"' ||
           c == '\'' || c == ',';
}

static int anchor_at(const uint8_t *s, const uint8_t *e, const char *a, const uint8_t *lower) {
    for (; *a; a++, s++)
        if (s >= e || lower[*s] != (uint8_t)*a) return 0;
    return 1;
}

/* the exact test: a special byte, or an anchor (ASCII case folded) */
static int may_secret_row(const uint8_t *s, const uint8_t *e, const uint8_t *special, const uint8_t *lower) {
    for (; s < e; s++) {
        if (special[*s]) return 1;
        for (int i = 0; SECRET_ANCHORS[i].lit; i++) {
            const char *a = SECRET_ANCHORS[i].lit;
            if (lower[*s] != (uint8_t)a[0] || !anchor_at(s, e, a, lower)) continue;
            if (strcmp(a, "-token") != 0 || (s + 6 < e && token_next(s[6]))) return 1;
        }
    }
    return 0;
}

typedef uint8_t fx_v16 __attribute__((vector_size(16)));

static inline fx_v16 load16(const uint8_t *p) {
    fx_v16 v;
    memcpy(&v, p, 16);
    return v;
}

/* the rough test of 16 positions: nonzero lanes where a special byte or an anchor's pair is */
static inline fx_v16 rough16(const uint8_t *p) {
    const fx_v16 v0 = load16(p), v1 = load16(p + 1), v5 = load16(p + 5), v6 = load16(p + 6);
    const fx_v16 f0 = v0 | 0x20, f1 = v1 | 0x20; /* letters folded to lower case (others are not compared) */
    fx_v16 m = (fx_v16)(v0 >= 0x80) | (fx_v16)(v0 == '=') | (fx_v16)(v0 == '@') | (fx_v16)(v0 == '\'') |
               (fx_v16)(v0 == '"') | (fx_v16)(v0 == '\n') | (fx_v16)(v0 == 0) | (fx_v16)(v0 == '_');
    const fx_v16 k0 = (fx_v16)(f0 == 'k'), dash1 = (fx_v16)(v1 == '-'), i1 = (fx_v16)(f1 == 'i');
    m |= (k0 & dash1) | (k0 & i1) | ((fx_v16)(f0 == 's') & (i1 | (fx_v16)(f1 == 'w'))) |
         ((fx_v16)(f0 == 'b') & (fx_v16)(f1 == 'e')) | ((fx_v16)(f0 == 'p') & i1) |
         ((fx_v16)(f0 == 'c') & ((fx_v16)(f1 == 'r') | (fx_v16)(f1 == 'c'))) |
         (((fx_v16)(f0 == 'x') | (fx_v16)(f0 == 'h')) & dash1) | ((fx_v16)(f0 == 'i') & (fx_v16)(f1 == 'z'));
    /* "-token" then token_next: "-t", 'n' four bytes on, then a space, \t-\r, 0x1c-0x1f, ',' or a special byte */
    const fx_v16 next = (fx_v16)(v6 == ' ') | (fx_v16)((fx_v16)(v6 - '\t') <= 4) |
                        (fx_v16)((fx_v16)(v6 - 0x1c) <= 3) | (fx_v16)(v6 == ',') | (fx_v16)(v6 == '=') |
                        (fx_v16)(v6 == 0) | (fx_v16)(v6 == '"') | (fx_v16)(v6 == '\'');
    m |= (fx_v16)(v0 == '-') & (fx_v16)(f1 == 't') & (fx_v16)((v5 | 0x20) == 'n') & next;
    return m;
}

static int rough_row(const uint8_t *s, int64_t len) {
    fx_v16 acc = {0};
    int64_t j = 0;
    for (; j + 22 <= len; j += 16) acc |= rough16(s + j); /* rough16 reads 22 bytes */
    if (j < len) { /* the tail (under 22 bytes), padded with a byte no test takes */
        uint8_t pad[48];
        memset(pad, 1, sizeof pad);
        memcpy(pad, s + j, (size_t)(len - j));
        acc |= rough16(pad);
        if (len - j > 16) acc |= rough16(pad + 16);
    }
    uint64_t a[2];
    memcpy(a, &acc, 16);
    return (a[0] | a[1]) != 0;
}

void fx_may_secret(const int64_t *offsets, const uint8_t *data, const uint8_t *valid, int64_t first, int64_t n,
                   uint8_t *out) {
    uint8_t special[256], lower[256];
    for (int c = 0; c < 256; c++) {
        lower[c] = (uint8_t)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        special[c] = c >= 0x80;
    }
    for (const char *p = "=@'\"\n_"; *p; p++) special[(uint8_t)*p] = 1;
    special[0] = 1;
    for (int64_t r = 0; r < n; r++) {
        int64_t k = first + r;
        out[r] = 0;
        if (valid && !(valid[k >> 3] & (1u << (k & 7)))) continue;
        const uint8_t *s = data + offsets[k], *e = data + offsets[k + 1];
        out[r] = (uint8_t)(rough_row(s, e - s) && may_secret_row(s, e, special, lower));
    }
}
