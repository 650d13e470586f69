//! `meshparity schema`

use crate::exit;

pub fn run() -> u8 {
    print!("{}", meshparity_specs::schema::json_schema());
    exit::OK
}
