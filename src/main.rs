fn main() {
    for p in std::env::args().skip(1) {
        match meshparity_specs::load(std::path::Path::new(&p)) {
            Ok(l) => {
                println!("ok {} cells", l.spec.cells().len());
                print!("{}", l.warnings.render(false));
            }
            Err(meshparity_specs::SpecError::Invalid(d)) => print!("{}", d.render(false)),
            Err(e) => println!("{e}"),
        }
    }
}
