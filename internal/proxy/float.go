package proxy

import (
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"unsafe"
)

// atof converts a number that num has read as json.Unmarshal does into a
// float64: the nearest float64, not ok beyond its range.
//
// An answer carries a logprob per generated token, written as Python writes
// a float (16 or 17 digits, most of them), and strconv.ParseFloat took half
// of their reading: most of its time goes to reading the text again for
// forms JSON does not have (underscores, hex, inf). Here the digits are read
// once into a 64-bit mantissa and a power of ten, converted with the
// Eisel-Lemire method (Lemire, "Number Parsing at a Gigabyte per Second",
// 2021), which either gives the correctly rounded float64 or says it cannot
// tell; then, and for more than 19 digits or a power outside the table,
// strconv decides.
func atof(num []byte) (f float64, ok bool) {
	if man, exp10, neg, ok := decimal(num); ok {
		if man == 0 {
			if neg {
				return math.Copysign(0, -1), true
			}
			return 0, true
		}
		if f, ok := eiselLemire(man, exp10, neg); ok {
			return f, true
		}
	}
	// The bytes are only read during the call.
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(num), len(num)), 64)
	return f, err == nil
}

// decimal splits a JSON number into man×10^exp10, not ok when its
// significant digits do not fit in 19 or its exponent has more than four
// digits (strconv takes those).
func decimal(num []byte) (man uint64, exp10 int, neg, ok bool) {
	i := 0
	if i < len(num) && num[i] == '-' {
		neg = true
		i++
	}
	digits := 0 // significant digits in man: leading zeros do not count
	frac := false
	for ; i < len(num); i++ {
		c := num[i]
		if c == '.' {
			frac = true
			continue
		}
		d := c - '0'
		if d > 9 {
			break
		}
		if frac {
			exp10--
		}
		if man == 0 && d == 0 {
			continue
		}
		if digits++; digits > 19 {
			return 0, 0, false, false
		}
		man = man*10 + uint64(d)
	}
	if i < len(num) { // an exponent: num has checked its form
		i++
		eneg := num[i] == '-'
		if num[i] == '-' || num[i] == '+' {
			i++
		}
		if len(num)-i > 4 {
			return 0, 0, false, false
		}
		e := 0
		for ; i < len(num); i++ {
			e = e*10 + int(num[i]-'0')
		}
		if eneg {
			e = -e
		}
		exp10 += e
	}
	return man, exp10, neg, true
}

// The powers of ten the table holds: Python writes a logprob down to about
// 1e-45 (a float32's smallest) with 16 digits after its first, so 10^-61,
// and -9999.0 at most.
const minPow10, maxPow10 = -96, 32

// pow10s[q-minPow10] is 10^q as a 128-bit mantissa, its top bit set, high
// word first, made as the method's authors make their table: 5^q truncated
// for q ≥ 0; for q < 0, 2^b/5^-q plus one, then truncated, with b chosen
// so that the quotient has 128 bits (q ≥ -27) or more. The binary exponent
// is not stored; it follows from q (see eiselLemire).
var pow10s = func() (t [maxPow10 - minPow10 + 1][2]uint64) {
	five := big.NewInt(5)
	for q := minPow10; q <= maxPow10; q++ {
		p := new(big.Int)
		if q >= 0 {
			p.Exp(five, big.NewInt(int64(q)), nil)
			if n := p.BitLen(); n < 128 {
				p.Lsh(p, uint(128-n))
			}
		} else {
			p5 := new(big.Int).Exp(five, big.NewInt(int64(-q)), nil)
			z := p5.BitLen() // 5^-q < 2^z, and not equal: it is odd
			b := z + 127
			if q < -27 {
				b = 2*z + 128
			}
			p.Lsh(big.NewInt(1), uint(b))
			p.Quo(p, p5)
			p.Add(p, big.NewInt(1))
		}
		if n := p.BitLen(); n > 128 {
			p.Rsh(p, uint(n-128))
		}
		lo := new(big.Int).And(p, new(big.Int).SetUint64(math.MaxUint64))
		t[q-minPow10] = [2]uint64{new(big.Int).Rsh(p, 64).Uint64(), lo.Uint64()}
	}
	return t
}()

// eiselLemire returns the float64 nearest to man×10^exp10 (man not 0), or
// not ok when the 128-bit product cannot settle the rounding, the result
// would be subnormal or infinite, or exp10 is outside the table.
func eiselLemire(man uint64, exp10 int, neg bool) (float64, bool) {
	if exp10 < minPow10 || exp10 > maxPow10 {
		return 0, false
	}
	pow := &pow10s[exp10-minPow10]
	clz := bits.LeadingZeros64(man)
	man <<= uint(clz)
	// floor(exp10·log2(10)), as 217706/2^16 approximates log2(10) closely
	// enough over the table, plus the biased exponent of the product.
	exp2 := uint64(217706*exp10>>16+64+1023) - uint64(clz)

	hi, lo := bits.Mul64(man, pow[0])
	// The table's 10^q is short of the true one by less than one unit of
	// its last word, so the product is short by less than man in lo. When
	// the bits below the mantissa's are all ones, that could carry into it:
	// take the next 64 bits of the product into account.
	if hi&0x1ff == 0x1ff && lo+man < man {
		hi2, lo2 := bits.Mul64(man, pow[1])
		mergedHi, mergedLo := hi, lo+hi2
		if mergedLo < lo {
			mergedHi++
		}
		if mergedHi&0x1ff == 0x1ff && mergedLo+1 == 0 && lo2+man < man {
			return 0, false // still undecided
		}
		hi, lo = mergedHi, mergedLo
	}

	// The product's top bit is at 127 or 126: keep 54 bits below it (the
	// 53 of a float64 and one to round with).
	msb := hi >> 63
	mant := hi >> (msb + 9)
	exp2 -= 1 ^ msb
	// Exactly halfway between two float64s, as far as these bits show:
	// rounding to even needs bits the product does not have.
	if lo == 0 && hi&0x1ff == 0 && mant&3 == 1 {
		return 0, false
	}
	mant += mant & 1 // round half up on the 54th bit
	mant >>= 1
	if mant>>53 > 0 { // rounding carried into a new bit
		mant >>= 1
		exp2++
	}
	if exp2-1 >= 0x7ff-1 { // subnormal, zero or infinite: strconv's
		return 0, false
	}
	b := exp2<<52 | mant&(1<<52-1)
	if neg {
		b |= 1 << 63
	}
	return math.Float64frombits(b), true
}
